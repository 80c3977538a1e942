// Package annotation is the grammar of sqlflight's SQL comment
// annotations, such as /* sqlflight: soft=30s hard=5m name=catalog */:
// parsing one into the policy fields it sets, merging them over a lower
// layer's policy, and remembering parsed texts.
//
// Parse is strict: any malformed or unknown entry, a value out of range, a
// name= outside 1 to MaxNameLen bytes of letters, digits and _ - . : /, or
// text that is not valid UTF-8 makes the whole annotation an error wrapping
// ErrBad, and fields that do not make a usable policy (Validate) too. An
// annotation overrides field by field (Merge); one that asks for sharing
// (a positive soft=, coalesce) outranks a lower layer's "don't". pure=
// names functions the statement vouches for; it is the caller's to decide
// whether to trust it. JSON is the fields' encoding in an Explanation,
// durations as Go duration strings. Everything here is safe for concurrent
// use.
package annotation

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sqlflight/sqlflight/internal/errtext"
	"github.com/sqlflight/sqlflight/internal/memo"
	"github.com/sqlflight/sqlflight/internal/sqlscan"
)

// ErrBad is wrapped by the error of a malformed annotation (the root's
// ErrBadAnnotation is this very value).
var ErrBad = errors.New("sqlflight: bad annotation")

// Fields are the policy fields an annotation sets: the root's Policy has
// the same fields, in the same order, so each converts to the other.
type Fields struct {
	Soft, Hard, Neg time.Duration
	Jitter, Beta    float64
	MaxRows         int
	MaxBytes        int64
	Wait, Timeout   time.Duration
	Tables          []string
	Name            string
	Coalesce        bool
	NoCoalesce      bool
	NoBatch         bool
	NoCache         bool
	Off             bool
}

// Set holds the bits of the fields an annotation sets.
type Set uint32

// The fields an annotation may set.
const (
	SetSoft Set = 1 << iota
	SetHard
	SetNeg
	SetJitter
	SetBeta
	SetMaxRows
	SetMaxBytes
	SetWait
	SetTimeout
	SetTables
	SetName
	SetCoalesce
	SetNoCoalesce
	SetNoCache
	SetOff
	SetPure
	SetNoBatch
)

// Annotation is a parsed `sqlflight:` comment: the fields it sets.
type Annotation struct {
	Fields Fields
	Set    Set
	// Pure names functions the statement vouches for as safe to share
	// although the server says they are VOLATILE (pure=fn,schema.fn).
	Pure []string
}

// Validate reports whether the fields make a usable policy (the root's
// Policy.Validate).
func Validate(p Fields) error {
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

// Parse parses the entries of a sqlflight comment (the annotation grammar).
// Any malformed or unknown entry makes the whole annotation an error, and
// so does text that is not valid UTF-8 (a name= label must be).
func Parse(text string) (Annotation, error) {
	var a Annotation
	if !utf8.ValidString(text) {
		return a, fmt.Errorf("%w: not valid UTF-8", ErrBad)
	}
	for _, f := range strings.Fields(text) {
		k, v, hasV := strings.Cut(f, "=")
		var err error
		if !hasV {
			switch k {
			case "coalesce":
				a.Fields.Coalesce, a.Set = true, a.Set|SetCoalesce
			case "nocoalesce":
				a.Fields.NoCoalesce, a.Set = true, a.Set|SetNoCoalesce
			case "nobatch":
				a.Fields.NoBatch, a.Set = true, a.Set|SetNoBatch
			case "nocache":
				a.Fields.NoCache, a.Set = true, a.Set|SetNoCache
			case "off":
				a.Fields.Off, a.Set = true, a.Set|SetOff
			default:
				return a, fmt.Errorf("%w: unknown entry %q", ErrBad, f)
			}
			continue
		}
		if v == "" {
			return a, fmt.Errorf("%w: %q has no value", ErrBad, f)
		}
		switch k {
		case "soft":
			a.Fields.Soft, err = Duration(v)
			a.Set |= SetSoft
		case "hard":
			a.Fields.Hard, err = Duration(v)
			a.Set |= SetHard
		case "ttl":
			a.Fields.Soft, err = Duration(v)
			a.Fields.Hard = a.Fields.Soft
			a.Set |= SetSoft | SetHard
		case "neg":
			a.Fields.Neg, err = Duration(v)
			a.Set |= SetNeg
		case "wait":
			a.Fields.Wait, err = Duration(v)
			a.Set |= SetWait
		case "timeout":
			a.Fields.Timeout, err = Duration(v)
			a.Set |= SetTimeout
		case "jitter":
			a.Fields.Jitter, err = Percent(v)
			if err == nil && a.Fields.Jitter == 0 {
				a.Fields.Jitter = -1 // explicitly none
			}
			a.Set |= SetJitter
		case "beta":
			a.Fields.Beta, err = strconv.ParseFloat(v, 64)
			if err == nil && (a.Fields.Beta < 0 || a.Fields.Beta != a.Fields.Beta) {
				err = errors.New("must be a number ≥ 0")
			}
			if err == nil && a.Fields.Beta == 0 {
				a.Fields.Beta = -1 // explicitly disabled
			}
			a.Set |= SetBeta
		case "maxrows":
			var n int64
			n, err = strconv.ParseInt(v, 10, 64)
			if err == nil && (n <= 0 || n > 1<<31) {
				err = errors.New("must be a positive row count")
			}
			a.Fields.MaxRows = int(n)
			a.Set |= SetMaxRows
		case "maxbytes":
			a.Fields.MaxBytes, err = Bytes(v)
			a.Set |= SetMaxBytes
		case "tables":
			for t := range strings.SplitSeq(v, ",") {
				if t = strings.TrimSpace(t); t == "" {
					err = errors.New("empty table name")
					break
				}
				a.Fields.Tables = append(a.Fields.Tables, t)
			}
			a.Set |= SetTables
		case "name":
			a.Fields.Name = v
			err = CheckName(v)
			a.Set |= SetName
		case "pure":
			for fn := range strings.SplitSeq(v, ",") {
				if fn = strings.TrimSpace(fn); fn == "" {
					err = errors.New("empty function name")
					break
				}
				a.Pure = append(a.Pure, fn)
			}
			a.Set |= SetPure
		default:
			return a, fmt.Errorf("%w: unknown key %q", ErrBad, k)
		}
		if err != nil {
			return a, errtext.Wrapf("%w: %s: %v", ErrBad, f, err)
		}
	}
	if err := Validate(a.Fields); err != nil {
		return a, errtext.Wrapf("%w: %v", ErrBad, err)
	}
	return a, nil
}

// Duration parses a non-negative Go duration (30s, 5m).
func Duration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, err
	}
	if d < 0 {
		return 0, errors.New("negative duration")
	}
	return d, nil
}

// Percent parses a percentage in [0%, 100%) as a fraction.
func Percent(v string) (float64, error) {
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

// Bytes parses a positive size: bytes, or with B, KiB, MiB or GiB, at most
// 1 TiB.
func Bytes(v string) (int64, error) {
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

// Merge returns base with the fields the annotation sets replaced, and
// sharing turned back on where it asks for it.
func (a *Annotation) Merge(base Fields) Fields {
	p := base
	if a.Set&SetSoft != 0 {
		p.Soft = a.Fields.Soft
	}
	if a.Set&SetHard != 0 {
		p.Hard = a.Fields.Hard
	}
	if a.Set&SetNeg != 0 {
		p.Neg = a.Fields.Neg
	}
	if a.Set&SetJitter != 0 {
		p.Jitter = a.Fields.Jitter
	}
	if a.Set&SetBeta != 0 {
		p.Beta = a.Fields.Beta
	}
	if a.Set&SetMaxRows != 0 {
		p.MaxRows = a.Fields.MaxRows
	}
	if a.Set&SetMaxBytes != 0 {
		p.MaxBytes = a.Fields.MaxBytes
	}
	if a.Set&SetWait != 0 {
		p.Wait = a.Fields.Wait
	}
	if a.Set&SetTimeout != 0 {
		p.Timeout = a.Fields.Timeout
	}
	if a.Set&SetTables != 0 {
		p.Tables = a.Fields.Tables
	}
	if a.Set&SetName != 0 {
		p.Name = a.Fields.Name
	}
	// An annotation that asks for sharing outranks a lower layer's "don't".
	if a.Set&SetSoft != 0 && a.Fields.Soft > 0 {
		p.NoCache, p.Off = false, false
	}
	if a.Set&SetCoalesce != 0 {
		p.Coalesce, p.NoCoalesce, p.Off = true, false, false
	}
	if a.Set&SetNoCoalesce != 0 {
		p.NoCoalesce, p.Coalesce = true, false
	}
	if a.Set&SetNoBatch != 0 {
		p.NoBatch = true
	}
	if a.Set&SetNoCache != 0 {
		p.NoCache = true
	}
	if a.Set&SetOff != 0 {
		p.Off = true
	}
	if p.Hard != 0 && p.Hard < p.Soft {
		p.Hard = p.Soft
	}
	return p
}

// annotations remembers parsed annotations per text, in bounded memory: when
// the map is full (4,096 texts) a new one starts, and texts over
// maxMemoAnnotation bytes are parsed each time rather than kept. Lookups
// take no lock.
var annotations = memo.NewMap[string, *Result](4096, 0, nil)

// maxMemoAnnotation bounds the annotation texts the memo keeps (4,096 of
// them at most): a real one is a few dozen bytes.
const maxMemoAnnotation = 1 << 10

// Result is a parsed annotation or its error.
type Result struct {
	A   Annotation
	Err error
}

// Of is Cached for a scanned statement, kept on its (memoized) scan
// result.
func Of(r *sqlscan.Result) *Result {
	if v, ok := r.Parsed.Load().(*Result); ok {
		return v
	}
	a, err := Cached(r.Annotation)
	v := &Result{a, err}
	r.Parsed.Store(v)
	return v
}

// Cached is Parse, remembered per text in bounded memory (4,096 texts
// of at most 1 KiB; longer ones are parsed each time).
func Cached(text string) (Annotation, error) {
	if len(text) > maxMemoAnnotation {
		return Parse(text)
	}
	if r, ok := annotations.Load(text); ok {
		return r.A, r.Err
	}
	a, err := Parse(text)
	annotations.LoadOrStore(text, &Result{a, err})
	return a, err
}

// MaxNameLen is the longest a statement's name= may be, in bytes.
const MaxNameLen = 128

// CheckName reports whether n is a valid name= of an annotation: 1 to
// MaxNameLen bytes of ASCII letters, digits and _ - . : /. Anything else
// makes the annotation malformed (a label of metrics and logs stays short
// and plain).
func CheckName(n string) error {
	if n == "" {
		return errors.New("empty name")
	}
	if len(n) > MaxNameLen {
		return fmt.Errorf("name longer than %d bytes", MaxNameLen)
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.' || c == ':' || c == '/') {
			return fmt.Errorf("name holds %q: only letters, digits and _ - . : / are allowed", c)
		}
	}
	return nil
}
