package integration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlflight/sqlflight"
)

// TestORM runs sqlflight under the common Go data-access layers — sqlx, GORM,
// bun and sqlc-style generated code — on a *sql.DB from sqlflight. For each
// it shows, against real PostgreSQL, that:
//
//  1. a read given a policy the layer's idiomatic way (an annotation in the
//     SQL, the layer's comment hook, or a context policy) is cached: the
//     second identical read is a fresh hit and reaches no database;
//  2. a transaction opened through the layer bypasses sharing, and sees its
//     own uncommitted write, even under a context policy with a TTL;
//  3. a write through the layer invalidates: the next cached read returns the
//     new value.
func TestORM(t *testing.T) {
	t.Run("sqlx", testORMSqlx)
	t.Run("gorm", testORMGorm)
	t.Run("bun", testORMBun)
	t.Run("sqlc", testORMSqlc)
}

// errRollback makes the ORMs' transaction helpers roll back.
var errRollback = errors.New("roll back on purpose")

// ormEnv is one ORM subtest's world: its own Shield, and its own table
// (id int primary key, name text) holding (1, 'alpha') and (2, 'beta').
type ormEnv struct {
	ctx   context.Context
	db    *sql.DB // through sqlflight
	sh    *sqlflight.Shield
	table string
}

func newORMEnv(t *testing.T, prefix string) *ormEnv {
	t.Helper()
	dsn := postgresDSN(t)
	admin := openRaw(t, dsn)
	db, sh := openFlight(t, dsn)
	e := &ormEnv{ctx: testContext(t, testTimeout), db: db, sh: sh, table: "orm_" + prefix + "_" + uniqueID(t)}
	mustExec(t, admin,
		fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, name text NOT NULL)`, e.table),
		fmt.Sprintf(`INSERT INTO %s VALUES (1, 'alpha'), (2, 'beta')`, e.table))
	cleanupExec(t, admin, fmt.Sprintf(`DROP TABLE IF EXISTS %s`, e.table))
	return e
}

// expectCached runs read twice. The first must return want (from the cache
// or the database); the second must return want again from the cache: a
// fresh hit, with no origin execution.
func (e *ormEnv) expectCached(t *testing.T, what string, want string, read func() (string, error)) {
	t.Helper()
	before := e.sh.Stats()
	got, err := read()
	if err != nil || got != want {
		t.Fatalf("%s, first read: (%q, %v), want %q; %s", what, got, err, want, statsString(e.sh.Stats()))
	}
	waitUntil(t, 30*time.Second, func() string { return what + ": the first read to fill the cache: " + statsString(e.sh.Stats()) },
		func() bool {
			st := e.sh.Stats()
			return (st.Fills > before.Fills || st.FreshHits > before.FreshHits) && st.InFlight == 0
		})
	mid := e.sh.Stats()
	got, err = read()
	if err != nil || got != want {
		t.Fatalf("%s, second read: (%q, %v), want %q", what, got, err, want)
	}
	after := e.sh.Stats()
	if after.FreshHits != mid.FreshHits+1 || after.OriginExecutions != mid.OriginExecutions {
		t.Errorf("%s: second read was not a cache hit: fresh hits %d -> %d, origin executions %d -> %d; %s",
			what, mid.FreshHits, after.FreshHits, mid.OriginExecutions, after.OriginExecutions, statsString(after))
	}
}

// expectTxBypass runs tx, which must open a transaction through the ORM,
// write name 'in-tx' to row 1, read it back (returning what it read) and roll
// back. It checks that the read saw the uncommitted write, and that the
// transaction's statements bypassed sharing.
func (e *ormEnv) expectTxBypass(t *testing.T, tx func() (string, error)) {
	t.Helper()
	before := e.sh.Stats()
	got, err := tx()
	if err != nil && !errors.Is(err, errRollback) {
		t.Fatalf("transaction: %v", err)
	}
	if got != "in-tx" {
		t.Errorf("read inside the transaction: %q, want its own uncommitted write %q", got, "in-tx")
	}
	after := e.sh.Stats()
	if after.BypassReasons["transaction"] <= before.BypassReasons["transaction"] {
		t.Errorf("the transaction's statements did not bypass as %q: %s", "transaction", statsString(after))
	}
}

// ttlCtx is the context route: a TTL that applies to every read under it.
func (e *ormEnv) ttlCtx() context.Context {
	return sqlflight.WithTTL(e.ctx, time.Minute, time.Minute)
}

// ---------------------------------------------------------------------------
// sqlx: the annotation goes in the query text.

type sqlxItem struct {
	ID   int64  `db:"id"`
	Name string `db:"name"`
}

func testORMSqlx(t *testing.T) {
	e := newORMEnv(t, "sqlx")
	x := sqlx.NewDb(e.db, "pgx") // "pgx" tells sqlx to bind $1, $2, …
	ctx := e.ctx

	read := func() (string, error) {
		var it sqlxItem
		err := x.GetContext(ctx, &it, `/* sqlflight: ttl=1m */ SELECT id, name FROM `+e.table+` WHERE id = $1`, 1)
		return it.Name, err
	}

	t.Run("cached read", func(t *testing.T) {
		e.expectCached(t, "sqlx GetContext with an annotation", "alpha", read)
	})

	t.Run("transaction bypasses", func(t *testing.T) {
		e.expectTxBypass(t, func() (string, error) {
			tx, err := x.BeginTxx(e.ttlCtx(), nil)
			if err != nil {
				return "", err
			}
			defer func() { _ = tx.Rollback() }()
			if _, err := tx.NamedExecContext(ctx, `UPDATE `+e.table+` SET name = :name WHERE id = :id`,
				sqlxItem{ID: 1, Name: "in-tx"}); err != nil {
				return "", err
			}
			var it sqlxItem
			err = tx.GetContext(e.ttlCtx(), &it, `/* sqlflight: ttl=1m */ SELECT id, name FROM `+e.table+` WHERE id = $1`, 1)
			return it.Name, err
		})
		e.expectCached(t, "sqlx read after the rollback", "alpha", read)
	})

	t.Run("write invalidates", func(t *testing.T) {
		if _, err := x.NamedExecContext(ctx, `UPDATE `+e.table+` SET name = :name WHERE id = :id`,
			sqlxItem{ID: 1, Name: "updated"}); err != nil {
			t.Fatal(err)
		}
		e.expectCached(t, "sqlx read after the update", "updated", read)
	})
}

// ---------------------------------------------------------------------------
// GORM: a context policy through WithContext, or the annotation in Raw SQL.

type gormItem struct {
	ID   int64  `gorm:"column:id;primaryKey"`
	Name string `gorm:"column:name"`
}

func testORMGorm(t *testing.T) {
	e := newORMEnv(t, "gorm")
	g, err := gorm.Open(postgres.New(postgres.Config{Conn: e.db}), &gorm.Config{
		Logger: logger.Default.LogMode(logger.Silent),
	})
	if err != nil {
		t.Fatalf("gorm.Open: %v", err)
	}

	// The context route: every read under the context is cached.
	read := func() (string, error) {
		var it gormItem
		err := g.WithContext(e.ttlCtx()).Table(e.table).Where("id = ?", 1).Take(&it).Error
		return it.Name, err
	}
	// The annotation route: Raw SQL keeps its comment.
	readRaw := func() (string, error) {
		var name string
		err := g.WithContext(e.ctx).Raw(`/* sqlflight: ttl=1m */ SELECT name FROM `+e.table+` WHERE id = ?`, 2).Scan(&name).Error
		return name, err
	}

	t.Run("cached read", func(t *testing.T) {
		e.expectCached(t, "gorm Take under WithTTL", "alpha", read)
		e.expectCached(t, "gorm Raw with an annotation", "beta", readRaw)
	})

	t.Run("transaction bypasses", func(t *testing.T) {
		var got string
		e.expectTxBypass(t, func() (string, error) {
			err := g.WithContext(e.ttlCtx()).Transaction(func(tx *gorm.DB) error {
				if err := tx.Table(e.table).Where("id = ?", 1).Update("name", "in-tx").Error; err != nil {
					return err
				}
				var it gormItem
				if err := tx.Table(e.table).Where("id = ?", 1).Take(&it).Error; err != nil {
					return err
				}
				got = it.Name
				return errRollback
			})
			return got, err
		})
		e.expectCached(t, "gorm read after the rollback", "alpha", read)
	})

	t.Run("write invalidates", func(t *testing.T) {
		// GORM wraps the UPDATE in its default transaction; its commit
		// invalidates.
		if err := g.WithContext(e.ctx).Table(e.table).Where("id = ?", 1).Update("name", "updated").Error; err != nil {
			t.Fatal(err)
		}
		e.expectCached(t, "gorm read after the update", "updated", read)
		// And without GORM's default transaction.
		if err := g.Session(&gorm.Session{SkipDefaultTransaction: true}).WithContext(e.ctx).
			Table(e.table).Where("id = ?", 2).Update("name", "updated-2").Error; err != nil {
			t.Fatal(err)
		}
		e.expectCached(t, "gorm Raw read after the update", "updated-2", readRaw)
	})
}

// ---------------------------------------------------------------------------
// bun: the query's Comment hook carries the annotation.

type bunItem struct {
	bun.BaseModel `bun:"alias:item"`

	ID   int64  `bun:"id,pk"`
	Name string `bun:"name,notnull"`
}

func testORMBun(t *testing.T) {
	e := newORMEnv(t, "bun")
	// bun.DB.Close would close e.db: openFlight's cleanup closes it instead.
	b := bun.NewDB(e.db, pgdialect.New())
	table := bun.Ident(e.table)

	read := func() (string, error) {
		var it bunItem
		err := b.NewSelect().Model(&it).ModelTableExpr("? AS item", table).
			Comment("sqlflight: ttl=1m").
			Where("id = ?", 1).Scan(e.ctx)
		return it.Name, err
	}

	t.Run("cached read", func(t *testing.T) {
		e.expectCached(t, "bun select with Comment", "alpha", read)
	})

	t.Run("transaction bypasses", func(t *testing.T) {
		var got string
		e.expectTxBypass(t, func() (string, error) {
			err := b.RunInTx(e.ttlCtx(), nil, func(ctx context.Context, tx bun.Tx) error {
				if _, err := tx.NewUpdate().Model(&bunItem{ID: 1, Name: "in-tx"}).ModelTableExpr("? AS item", table).
					Column("name").WherePK().Exec(ctx); err != nil {
					return err
				}
				var it bunItem
				if err := tx.NewSelect().Model(&it).ModelTableExpr("? AS item", table).
					Comment("sqlflight: ttl=1m").Where("id = ?", 1).Scan(ctx); err != nil {
					return err
				}
				got = it.Name
				return errRollback
			})
			return got, err
		})
		e.expectCached(t, "bun read after the rollback", "alpha", read)
	})

	t.Run("write invalidates", func(t *testing.T) {
		if _, err := b.NewUpdate().Model(&bunItem{ID: 1, Name: "updated"}).ModelTableExpr("? AS item", table).
			Column("name").WherePK().Exec(e.ctx); err != nil {
			t.Fatal(err)
		}
		e.expectCached(t, "bun read after the update", "updated", read)
	})
}

// ---------------------------------------------------------------------------
// sqlc: generated code takes a DBTX; the policy rides on the context (or in
// the query's SQL, where an annotation comment is kept).

// DBTX is the interface sqlc generates: *sql.DB and *sql.Tx both satisfy it.
type DBTX interface {
	ExecContext(context.Context, string, ...interface{}) (sql.Result, error)
	PrepareContext(context.Context, string) (*sql.Stmt, error)
	QueryContext(context.Context, string, ...interface{}) (*sql.Rows, error)
	QueryRowContext(context.Context, string, ...interface{}) *sql.Row
}

// sqlcQueries mirrors sqlc's Queries. sqlc's SQL is constant; here the table
// name is per test, so the texts are formatted once.
type sqlcQueries struct {
	db                                DBTX
	getItemNameSQL, updateItemNameSQL string
}

func newSQLCQueries(db DBTX, table string) *sqlcQueries {
	return &sqlcQueries{
		db: db,
		getItemNameSQL: fmt.Sprintf(`-- name: GetItemName :one
SELECT name FROM %s
WHERE id = $1`, table),
		updateItemNameSQL: fmt.Sprintf(`-- name: UpdateItemName :exec
UPDATE %s SET name = $2
WHERE id = $1`, table),
	}
}

func (q *sqlcQueries) WithTx(tx *sql.Tx) *sqlcQueries {
	c := *q
	c.db = tx
	return &c
}

func (q *sqlcQueries) GetItemName(ctx context.Context, id int64) (string, error) {
	row := q.db.QueryRowContext(ctx, q.getItemNameSQL, id)
	var name string
	err := row.Scan(&name)
	return name, err
}

func (q *sqlcQueries) UpdateItemName(ctx context.Context, id int64, name string) error {
	_, err := q.db.ExecContext(ctx, q.updateItemNameSQL, id, name)
	return err
}

func testORMSqlc(t *testing.T) {
	e := newORMEnv(t, "sqlc")
	q := newSQLCQueries(e.db, e.table)

	read := func() (string, error) { return q.GetItemName(e.ttlCtx(), 1) }

	t.Run("cached read", func(t *testing.T) {
		e.expectCached(t, "sqlc GetItemName under WithTTL", "alpha", read)
	})

	t.Run("transaction bypasses", func(t *testing.T) {
		e.expectTxBypass(t, func() (string, error) {
			tx, err := e.db.BeginTx(e.ttlCtx(), nil)
			if err != nil {
				return "", err
			}
			defer func() { _ = tx.Rollback() }()
			qtx := q.WithTx(tx)
			if err := qtx.UpdateItemName(e.ctx, 1, "in-tx"); err != nil {
				return "", err
			}
			return qtx.GetItemName(e.ttlCtx(), 1)
		})
		e.expectCached(t, "sqlc read after the rollback", "alpha", read)
	})

	t.Run("write invalidates", func(t *testing.T) {
		if err := q.UpdateItemName(e.ctx, 1, "updated"); err != nil {
			t.Fatal(err)
		}
		e.expectCached(t, "sqlc read after the update", "updated", read)
	})
}
