package sqlflight

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/sqlflight/sqlflight/internal/sqlscan"
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
	// NoCache stores nothing, whatever the TTLs say.
	NoCache bool `json:"nocache,omitempty"`
	// Off sends the statement straight to the database.
	Off bool `json:"off,omitempty"`
}

// Validate reports whether p is usable.
func (p Policy) Validate() error {
	switch {
	case p.Soft < 0 || p.Hard < 0 || p.Neg < 0 || p.Wait < 0 || p.Timeout < 0:
		return errors.New("sqlflight: negative duration in policy")
	case p.Hard != 0 && p.Hard < p.Soft:
		return fmt.Errorf("sqlflight: hard (%v) shorter than soft (%v)", p.Hard, p.Soft)
	case p.MaxRows < 0 || p.MaxBytes < 0:
		return errors.New("sqlflight: negative limit in policy")
	case p.Jitter >= 1:
		return fmt.Errorf("sqlflight: jitter %v must be below 100%%", p.Jitter)
	case p.Coalesce && p.NoCoalesce:
		return errors.New("sqlflight: coalesce and nocoalesce together")
	}
	return nil
}

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

// Bits of the fields an annotation sets.
const (
	setSoft uint32 = 1 << iota
	setHard
	setNeg
	setJitter
	setBeta
	setMaxRows
	setMaxBytes
	setWait
	setTimeout
	setTables
	setName
	setCoalesce
	setNoCoalesce
	setNoCache
	setOff
	setPure
)

// annotation is a parsed `sqlflight:` comment: the fields it sets.
type annotation struct {
	p   Policy
	set uint32
	// pure names functions the statement vouches for as safe to share
	// although the server says they are VOLATILE (pure=fn,schema.fn).
	pure []string
}

// parseAnnotation parses the entries of a sqlflight comment (DESIGN §4).
// Any malformed or unknown entry makes the whole annotation an error, and
// so does text that is not valid UTF-8 (a name= label must be).
func parseAnnotation(text string) (annotation, error) {
	var a annotation
	if !utf8.ValidString(text) {
		return a, fmt.Errorf("%w: not valid UTF-8", ErrBadAnnotation)
	}
	for _, f := range strings.Fields(text) {
		k, v, hasV := strings.Cut(f, "=")
		var err error
		if !hasV {
			switch k {
			case "coalesce":
				a.p.Coalesce, a.set = true, a.set|setCoalesce
			case "nocoalesce":
				a.p.NoCoalesce, a.set = true, a.set|setNoCoalesce
			case "nocache":
				a.p.NoCache, a.set = true, a.set|setNoCache
			case "off":
				a.p.Off, a.set = true, a.set|setOff
			default:
				return a, fmt.Errorf("%w: unknown entry %q", ErrBadAnnotation, f)
			}
			continue
		}
		if v == "" {
			return a, fmt.Errorf("%w: %q has no value", ErrBadAnnotation, f)
		}
		switch k {
		case "soft":
			a.p.Soft, err = parseDuration(v)
			a.set |= setSoft
		case "hard":
			a.p.Hard, err = parseDuration(v)
			a.set |= setHard
		case "ttl":
			a.p.Soft, err = parseDuration(v)
			a.p.Hard = a.p.Soft
			a.set |= setSoft | setHard
		case "neg":
			a.p.Neg, err = parseDuration(v)
			a.set |= setNeg
		case "wait":
			a.p.Wait, err = parseDuration(v)
			a.set |= setWait
		case "timeout":
			a.p.Timeout, err = parseDuration(v)
			a.set |= setTimeout
		case "jitter":
			a.p.Jitter, err = parsePercent(v)
			if err == nil && a.p.Jitter == 0 {
				a.p.Jitter = -1 // explicitly none
			}
			a.set |= setJitter
		case "beta":
			a.p.Beta, err = strconv.ParseFloat(v, 64)
			if err == nil && (a.p.Beta < 0 || a.p.Beta != a.p.Beta) {
				err = errors.New("must be a number ≥ 0")
			}
			if err == nil && a.p.Beta == 0 {
				a.p.Beta = -1 // explicitly disabled
			}
			a.set |= setBeta
		case "maxrows":
			var n int64
			n, err = strconv.ParseInt(v, 10, 64)
			if err == nil && (n <= 0 || n > 1<<31) {
				err = errors.New("must be a positive row count")
			}
			a.p.MaxRows = int(n)
			a.set |= setMaxRows
		case "maxbytes":
			a.p.MaxBytes, err = parseBytes(v)
			a.set |= setMaxBytes
		case "tables":
			for t := range strings.SplitSeq(v, ",") {
				if t = strings.TrimSpace(t); t == "" {
					err = errors.New("empty table name")
					break
				}
				a.p.Tables = append(a.p.Tables, t)
			}
			a.set |= setTables
		case "name":
			a.p.Name = v
			err = checkName(v)
			a.set |= setName
		case "pure":
			for fn := range strings.SplitSeq(v, ",") {
				if fn = strings.TrimSpace(fn); fn == "" {
					err = errors.New("empty function name")
					break
				}
				a.pure = append(a.pure, fn)
			}
			a.set |= setPure
		default:
			return a, fmt.Errorf("%w: unknown key %q", ErrBadAnnotation, k)
		}
		if err != nil {
			return a, wrapf("%w: %s: %v", ErrBadAnnotation, f, err)
		}
	}
	if err := a.p.Validate(); err != nil {
		return a, wrapf("%w: %v", ErrBadAnnotation, err)
	}
	return a, nil
}

func parseDuration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, err
	}
	if d < 0 {
		return 0, errors.New("negative duration")
	}
	return d, nil
}

func parsePercent(v string) (float64, error) {
	n, ok := strings.CutSuffix(v, "%")
	if !ok {
		return 0, errors.New("want a percentage such as 10%")
	}
	f, err := strconv.ParseFloat(n, 64)
	if err != nil || f < 0 || f >= 100 || f != f {
		return 0, errors.New("want a percentage in [0%, 100%)")
	}
	return f / 100, nil
}

func parseBytes(v string) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"B", 1}} {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			v, mult = n, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 || n > (1<<40)/mult {
		return 0, errors.New("want a positive size such as 512KiB or 8MiB")
	}
	return n * mult, nil
}

// merge returns base with the fields the annotation sets replaced.
func (a *annotation) merge(base Policy) Policy {
	p := base
	if a.set&setSoft != 0 {
		p.Soft = a.p.Soft
	}
	if a.set&setHard != 0 {
		p.Hard = a.p.Hard
	}
	if a.set&setNeg != 0 {
		p.Neg = a.p.Neg
	}
	if a.set&setJitter != 0 {
		p.Jitter = a.p.Jitter
	}
	if a.set&setBeta != 0 {
		p.Beta = a.p.Beta
	}
	if a.set&setMaxRows != 0 {
		p.MaxRows = a.p.MaxRows
	}
	if a.set&setMaxBytes != 0 {
		p.MaxBytes = a.p.MaxBytes
	}
	if a.set&setWait != 0 {
		p.Wait = a.p.Wait
	}
	if a.set&setTimeout != 0 {
		p.Timeout = a.p.Timeout
	}
	if a.set&setTables != 0 {
		p.Tables = a.p.Tables
	}
	if a.set&setName != 0 {
		p.Name = a.p.Name
	}
	// An annotation that asks for sharing outranks a lower layer's "don't".
	if a.set&setSoft != 0 && a.p.Soft > 0 {
		p.NoCache, p.Off = false, false
	}
	if a.set&setCoalesce != 0 {
		p.Coalesce, p.NoCoalesce, p.Off = true, false, false
	}
	if a.set&setNoCoalesce != 0 {
		p.NoCoalesce, p.Coalesce = true, false
	}
	if a.set&setNoCache != 0 {
		p.NoCache = true
	}
	if a.set&setOff != 0 {
		p.Off = true
	}
	if p.Hard != 0 && p.Hard < p.Soft {
		p.Hard = p.Soft
	}
	return p
}

// annotations remembers parsed annotations per text, in bounded memory: when
// the map is full a new one starts, and texts over maxMemoAnnotation bytes
// are parsed each time rather than kept. Lookups take no lock.
var annotations atomic.Pointer[annotationMemo]

// maxMemoAnnotation bounds the annotation texts the memo keeps (4,096 of
// them at most): a real one is a few dozen bytes.
const maxMemoAnnotation = 1 << 10

type annotationMemo struct {
	m sync.Map // string → *annotationResult
	n atomic.Int64
}

type annotationResult struct {
	a   annotation
	err error
}

// parsedAnnotation is parseAnnotationCached for a scanned statement,
// kept on its (memoized) scan result.
func parsedAnnotation(r *sqlscan.Result) *annotationResult {
	if v, ok := r.Parsed.Load().(*annotationResult); ok {
		return v
	}
	a, err := parseAnnotationCached(r.Annotation)
	v := &annotationResult{a, err}
	r.Parsed.Store(v)
	return v
}

func parseAnnotationCached(text string) (annotation, error) {
	if len(text) > maxMemoAnnotation {
		return parseAnnotation(text)
	}
	memo := annotations.Load()
	if memo == nil {
		annotations.CompareAndSwap(nil, new(annotationMemo))
		memo = annotations.Load()
	}
	if v, ok := memo.m.Load(text); ok {
		r := v.(*annotationResult)
		return r.a, r.err
	}
	a, err := parseAnnotation(text)
	if memo.n.Add(1) > 4096 {
		annotations.CompareAndSwap(memo, new(annotationMemo))
		memo = annotations.Load()
	}
	memo.m.Store(text, &annotationResult{a, err})
	return a, err
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

func (r *Rule) matches(tables []string, normalized string) bool {
	if r.Match != nil && !r.Match.MatchString(normalized) {
		return false
	}
	if len(r.Tables) == 0 {
		return r.Match != nil
	}
	for _, want := range r.Tables {
		if i := strings.LastIndexByte(want, '.'); i >= 0 {
			want = want[i+1:]
		}
		for _, t := range tables {
			if strings.EqualFold(t, want) {
				return true
			}
		}
	}
	return false
}

// basePolicy is the policy below the annotation: the context's, else the
// first matching rule's, else the default. explicit says it came from the
// context (an opt-in for unknown functions).
func (s *Shield) basePolicy(ctx context.Context, tables []string, normalized string) (p Policy, explicit bool) {
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
