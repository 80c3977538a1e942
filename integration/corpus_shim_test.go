package integration

import (
	"context"
	"database/sql"

	"github.com/sqlflight/sqlflight"
)

// explainDB explains query the way db's Shield would route it.
//
// TODO(lead): replace with sqlflight.ExplainDB, which includes the server's
// verdict. This stand-in is text-only: it never asks the database.
func explainDB(ctx context.Context, db *sql.DB, query string) (sqlflight.Explanation, error) {
	if sh := sqlflight.ShieldOf(db); sh != nil {
		return sh.Explain(ctx, query), nil
	}
	return sqlflight.Default().Explain(ctx, query), nil
}
