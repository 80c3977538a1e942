package sqlflight

import (
	"context"

	"github.com/sqlflight/sqlflight/internal/key"
)

// Context scopes: a tenant (or any other partition the database cannot be
// told apart by from its connection) put into the key, for row-level
// security applications. See docs/guarantees.md, "Tenants and row-level security".

type scopeKey struct{}

// WithScope returns a context whose reads share flights and cached results
// only with reads under the same scope, in this process and, through the
// shared tier, in the fleet: every scope (the empty string included) is a
// partition of its own, and no scope never meets a scope. Name the tenant a
// row-level-security policy reads (WithScope(ctx, "tenant-b")).
//
// Statements run under ctx that change the session — SET, set_config, a
// function the server cannot prove IMMUTABLE or STABLE (the tenant helper
// that calls set_config), DO, CALL — make the connection a session of the
// scope rather than an unknown one: its later reads under the same scope
// still share, with the reads of every other connection whose last change
// was made under that scope, and its reads under any other scope (or none)
// go straight to the database. In return, the application promises that
// the statements it runs under a scope set everything its reads depend on
// (the tenant setting, a role, a search_path), whatever the connection held
// before: two sessions of one scope must answer every read alike. A change
// that a rollback undid leaves the session what it was before its
// transaction; one whose fate is unknown (a statement that failed, a
// COMMIT after a failed statement or a rollback to a savepoint) makes the
// session an unknown one. Temporary tables, and any change made under no
// scope, still make the connection bypass sharing until DISCARD ALL.
//
// The scope's value enters keys (and, hashed, the shared tier's keys); it
// never appears in metrics or logs.
func WithScope(ctx context.Context, scope string) context.Context {
	return context.WithValue(ctx, scopeKey{}, &scope)
}

// ScopeOf returns the scope ctx carries (see WithScope) and whether it
// carries one.
func ScopeOf(ctx context.Context) (string, bool) {
	if p, ok := ctx.Value(scopeKey{}).(*string); ok {
		return *p, true
	}
	return "", false
}

// partition is what a shared read is keyed under besides its statement
// (key.Partition): the context's scope, if any.
type partition = key.Partition
