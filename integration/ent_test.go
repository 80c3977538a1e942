package integration

import (
	"context"
	"errors"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
)

// TestORMEnt runs sqlflight under ent's SQL driver layer (entgo.io/ent/dialect/sql),
// the layer ent's generated clients run on, over a *sql.DB from sqlflight. No
// generated code: ent's own builder makes the SQL, and the driver's Query,
// Exec and Tx run it. As in TestORM, it shows against real PostgreSQL that:
//
//  1. a read under a context policy (sqlflight.WithTTL) through ent's driver
//     is cached, and so is one whose SQL carries an annotation put there with
//     the builder's Prefix;
//  2. a transaction opened with the driver's Tx bypasses sharing and sees its
//     own uncommitted write;
//  3. a write through ent's driver invalidates the cached read.
func TestORMEnt(t *testing.T) {
	e := newORMEnv(t, "ent")
	// The driver's Close would close e.db: openFlight's cleanup closes it.
	drv := entsql.OpenDB(dialect.Postgres, e.db)
	pg := func() *entsql.DialectBuilder { return entsql.Dialect(dialect.Postgres) }

	// queryName runs a one-row, one-column SELECT on conn (the driver or a
	// transaction from it) and returns the name read.
	queryName := func(ctx context.Context, conn dialect.ExecQuerier, sel *entsql.Selector) (string, error) {
		query, args := sel.Query()
		var rows entsql.Rows
		if err := conn.Query(ctx, query, args, &rows); err != nil {
			return "", err
		}
		defer rows.Close()
		if !rows.Next() {
			if err := rows.Err(); err != nil {
				return "", err
			}
			return "", errors.New("no rows")
		}
		var name string
		if err := rows.Scan(&name); err != nil {
			return "", err
		}
		return name, rows.Close()
	}
	selectName := func(id int) *entsql.Selector {
		return pg().Select("name").From(entsql.Table(e.table)).Where(entsql.EQ("id", id))
	}
	updateName := func(ctx context.Context, conn dialect.ExecQuerier, id int, name string) error {
		query, args := pg().Update(e.table).Set("name", name).Where(entsql.EQ("id", id)).Query()
		var res entsql.Result
		if err := conn.Exec(ctx, query, args, &res); err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return errors.Join(err, errors.New("update did not affect exactly one row"))
		}
		return nil
	}

	// The context route: ent passes the context through to database/sql.
	read := func() (string, error) { return queryName(e.ttlCtx(), drv, selectName(1)) }
	// The annotation route: the builder's Prefix puts the comment first.
	readAnnotated := func() (string, error) {
		return queryName(e.ctx, drv, selectName(2).Prefix(entsql.Raw("/* sqlflight: ttl=1m */")))
	}

	t.Run("cached read", func(t *testing.T) {
		e.expectCached(t, "ent driver Query under WithTTL", "alpha", read)
		e.expectCached(t, "ent driver Query with a Prefix annotation", "beta", readAnnotated)
	})

	t.Run("transaction bypasses", func(t *testing.T) {
		e.expectTxBypass(t, func() (string, error) {
			tx, err := drv.Tx(e.ttlCtx())
			if err != nil {
				return "", err
			}
			defer func() { _ = tx.Rollback() }()
			if err := updateName(e.ttlCtx(), tx, 1, "in-tx"); err != nil {
				return "", err
			}
			got, err := queryName(e.ttlCtx(), tx, selectName(1))
			if err != nil {
				return "", err
			}
			return got, errRollback
		})
		e.expectCached(t, "ent read after the rollback", "alpha", read)
	})

	t.Run("write invalidates", func(t *testing.T) {
		if err := updateName(e.ctx, drv, 1, "updated"); err != nil {
			t.Fatal(err)
		}
		e.expectCached(t, "ent read after the update", "updated", read)
		if err := updateName(e.ctx, drv, 2, "updated-2"); err != nil {
			t.Fatal(err)
		}
		e.expectCached(t, "ent annotated read after the update", "updated-2", readAnnotated)
	})
}
