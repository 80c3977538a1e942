package rowlevel

import "github.com/sqlflight/sqlflight/internal/sqlscan"

// Conds returns the conditions rf kept.
func (rf *ReadFilter) Conds() []sqlscan.Condition { return rf.conds }
