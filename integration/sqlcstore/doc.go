// Package sqlcstore is sqlc's pgx/v5 output for a small store of authors
// and books, kept for the integration tests of the pgx face: they run
// sqlc's code (its DBTX, WithTx, :one, :many, :exec, :execrows,
// :execresult, :copyfrom and :batchexec queries) through a
// *pgxflight.DB and compare it with the same code on the bare pool.
//
// db.go, models.go, query.sql.go, batch.go and copyfrom.go are generated:
// edit schema.sql or query.sql and run `sqlc generate` in this directory
// (sqlc v1.31.1, configured by sqlc.yaml). collect.go is written by hand,
// as sqlc users write the queries sqlc does not generate: pgx.CollectRows
// with pgx.RowToStructByName over structs whose db tags name the columns.
//
// The SQL names its tables without a schema: the tests give each run a
// schema of its own through the pool's search_path.
package sqlcstore
