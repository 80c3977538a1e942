package sqlflight

import "github.com/sqlflight/sqlflight/internal/annotation"

// MaxNameLen is the longest a statement's name= may be, in bytes.
const MaxNameLen = annotation.MaxNameLen
