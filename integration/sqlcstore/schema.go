package sqlcstore

import _ "embed"

// Schema is schema.sql, the tables sqlc generated this package for: the
// tests run it in a schema of their own.
//
//go:embed schema.sql
var Schema string
