package sqlflight

import (
	"context"
	"regexp"
	"time"

	"github.com/sqlflight/sqlflight/internal/annotation"
	"github.com/sqlflight/sqlflight/internal/route"
)

// Policy says how one statement is shared. Its zero value coalesces
// shareable statements, caches nothing and takes every limit from Options.
//
// Precedence: the statement's annotation, then a context policy
// (WithPolicy), then the first matching rule of Options.Rules, then
// Options.Default. Annotations override field by field.
type Policy struct {
	// Soft is the fresh window of a cached result; zero caches nothing.
	Soft time.Duration `json:"soft,omitempty"`
	// Hard is the total life of a cached result (stale but served while a
	// refresh runs); zero means Soft.
	Hard time.Duration `json:"hard,omitempty"`
	// Neg is the life of an empty result; zero means Soft.
	Neg time.Duration `json:"neg,omitempty"`
	// Jitter spreads Soft and Hard by ± this fraction; zero means 0.1, a
	// negative value none.
	Jitter float64 `json:"jitter,omitempty"`
	// Beta is the XFetch early-refresh aggressiveness; zero means 1, a
	// negative value disables early refresh.
	Beta float64 `json:"beta,omitempty"`

	// MaxRows and MaxBytes bound a shared result; zero means Options'.
	MaxRows  int   `json:"maxrows,omitempty"`
	MaxBytes int64 `json:"maxbytes,omitempty"`
	// Wait bounds how long a follower waits for a flight before running the
	// query itself; zero waits as long as its context allows.
	Wait time.Duration `json:"wait,omitempty"`
	// Timeout bounds an origin query; zero means Options.OriginTimeout.
	Timeout time.Duration `json:"timeout,omitempty"`
	// Tables the result depends on, overriding the scanner.
	Tables []string `json:"tables,omitempty"`
	// Name labels the statement in stats and logs.
	Name string `json:"name,omitempty"`

	// Coalesce asks for coalescing where a lower layer said otherwise
	// (nocoalesce, off). It vouches for nothing: a statement that calls a
	// VOLATILE function is never shared, whatever the policy; only the
	// statement's own pure= annotation entry can vouch for a function.
	Coalesce bool `json:"coalesce,omitempty"`
	// NoCoalesce makes every caller run its own query.
	NoCoalesce bool `json:"nocoalesce,omitempty"`
	// NoBatch keeps the reads of the statement out of batches: each key
	// runs its own statement (see docs/batching.md).
	NoBatch bool `json:"nobatch,omitempty"`
	// NoCache stores nothing, whatever the TTLs say.
	NoCache bool `json:"nocache,omitempty"`
	// Off sends the statement straight to the database.
	Off bool `json:"off,omitempty"`
}

// Validate reports whether p is usable.
func (p Policy) Validate() error { return annotation.Validate(annotation.Fields(p)) }

type policyKey struct{}

// WithPolicy returns a context whose statements follow p unless their own
// annotation says otherwise. This is the route that works under any ORM. It
// panics if p is invalid (see Validate): a policy is code, not input.
func WithPolicy(ctx context.Context, p Policy) context.Context {
	if err := p.Validate(); err != nil {
		panic(err)
	}
	return context.WithValue(ctx, policyKey{}, &p)
}

// A Rule gives a policy to the statements it matches, like a ProxySQL query
// rule: every condition that is set must hold. Rules sit below annotations
// and context policies and above Options.Default; the first match wins.
type Rule struct {
	// Tables matches statements that read any of these tables (compared
	// without regard to case or schema).
	Tables []string
	// Match matches the statement's normalized text (comments removed,
	// whitespace folded).
	Match *regexp.Regexp
	// Policy is what a matching statement gets.
	Policy Policy
}

// matches reports whether r matches a statement reading tables with the
// normalized text (route.RuleMatches).
func (r *Rule) matches(tables []string, normalized string) bool {
	return route.RuleMatches(r.Tables, r.Match, tables, normalized)
}

// basePolicy is the policy below the annotation: the context's, else the
// first matching rule's, else the default. explicit says it came from the
// context (an opt-in for unknown functions).
func (s *engine) basePolicy(ctx context.Context, tables []string, normalized string) (p Policy, explicit bool) {
	if cp, ok := ctx.Value(policyKey{}).(*Policy); ok {
		return *cp, true
	}
	for i := range s.opts.Rules {
		if r := &s.opts.Rules[i]; r.matches(tables, normalized) {
			return r.Policy, false
		}
	}
	return s.opts.Default, false
}

// WithTTL is WithPolicy for the common case: cache for soft, serve stale
// while refreshing until hard.
func WithTTL(ctx context.Context, soft, hard time.Duration) context.Context {
	return WithPolicy(ctx, Policy{Soft: soft, Hard: hard})
}

// WithoutSharing is WithPolicy{Off: true}: the context's statements go
// straight to the database.
func WithoutSharing(ctx context.Context) context.Context {
	return WithPolicy(ctx, Policy{Off: true})
}
