package sqlflight

import (
	"database/sql/driver"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
)

// The hot set: the hottest keys of the statements a Shield caches, saved
// so that a new instance can warm its cache before it takes traffic
// (prewarm.go). It is JSON:
//
//	{"format": "sqlflight-hotset", "version": 1, "saved": "2025-…Z",
//	 "statements": [
//	   {"fingerprint": "3f2a…", "text": "/* sqlflight: ttl=30s */ SELECT … WHERE id = $1",
//	    "policy": "soft=30s hard=30s", "calls": 1200,
//	    "keys": [{"calls": 700, "args": [{"t": "int64", "v": "42"}]}, …]},
//	   …]}
//
// Statements are hottest first, each with its text as the application sent
// it (annotation included) and its hottest keys; an argument is typed so
// that it comes back exactly: "int64", "float64" (shortest round-trip
// text, "NaN", "+Inf"), "bool", "string", "bytes" (standard base64;
// without "v", a nil []byte),
// "time" (RFC 3339 with nanoseconds and the zone offset) and "null"
// (without "v"); and Go's other numeric types, which some drivers (pgx)
// take as they are: "int", "int8", "int16", "int32", "uint", "uint16",
// "uint32", "uint64", "float32". The fingerprint and the policy only inform: Prewarm
// scans the text again and judges it under its own Shield's policy.

const (
	hotSetFormat  = "sqlflight-hotset"
	hotSetVersion = 1

	// Defaults and hard bounds of a hot set: statements, keys per
	// statement, arguments per key, and the bytes of a snapshot.
	defaultHotStatements = 32
	maxHotStatements     = 256
	maxHotArgs           = 256
	maxHotSetBytes       = 8 << 20
)

type hotSet struct {
	Format     string         `json:"format"`
	Version    int            `json:"version"`
	Saved      time.Time      `json:"saved"`
	Statements []hotStatement `json:"statements"`
}

type hotStatement struct {
	Fingerprint string       `json:"fingerprint"`
	Text        string       `json:"text"`
	Policy      string       `json:"policy,omitempty"`
	Calls       uint64       `json:"calls"`
	Keys        []hotKeyArgs `json:"keys"`
}

type hotKeyArgs struct {
	Calls uint64       `json:"calls"`
	Args  []typedValue `json:"args"`
	raw   []driver.Value
}

// typedValue is one argument: its type and its value in text.
type typedValue struct {
	T string  `json:"t"`
	V *string `json:"v,omitempty"`
}

// ErrBadHotSet is wrapped by the error of Prewarm when its hot set cannot
// be read: not JSON, another format or version, or over its bounds.
var ErrBadHotSet = errors.New("sqlflight: bad hot set")

// SaveHotSet writes the Shield's hot set to w: its 32 hottest statements
// that are shared and cached under a TTL, each with its hottest keys
// whose arguments are plain values within 1 KiB (at most 8 per
// statement), in the JSON format the README describes ("Pre-warming after
// a deploy"). Statements whose text exceeds 16 KiB are left out. Call it
// on shutdown, and give the file to Prewarm in the next instance. The
// snapshot holds the arguments of the hottest keys: keep it as you keep
// the application's logs, or better.
func (s *Shield) SaveHotSet(w io.Writer) error {
	hs := s.hotSet(defaultHotStatements, hotKeyCapacity)
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(hs)
}

// hotSet returns the Shield's hot set: at most n statements of at most m
// keys each.
func (s *Shield) hotSet(n, m int) *hotSet {
	hs := &hotSet{Format: hotSetFormat, Version: hotSetVersion, Saved: s.opts.Clock.Now().UTC(), Statements: []hotStatement{}}
	for _, st := range s.statements.snapshot() {
		if len(hs.Statements) >= n {
			break
		}
		p := st.plan.Load()
		if st.warm == "" || p == nil || p.reason != "" || !p.cache {
			continue
		}
		hst := hotStatement{Fingerprint: st.fp, Text: st.warm, Policy: p.policy(), Calls: st.count.Load()}
		for _, k := range st.keys.snapshot() {
			if !k.warm || len(hst.Keys) >= m {
				continue
			}
			hst.Keys = append(hst.Keys, hotKeyArgs{Calls: k.Calls, Args: encodeArgs(k.raw), raw: k.raw})
		}
		if len(hst.Keys) > 0 {
			hs.Statements = append(hs.Statements, hst)
		}
	}
	return hs
}

func encodeArgs(raw []driver.Value) []typedValue {
	out := make([]typedValue, len(raw))
	for i, v := range raw {
		out[i] = encodeArg(v)
	}
	return out
}

func encodeArg(v driver.Value) typedValue {
	text := func(t, s string) typedValue { return typedValue{T: t, V: &s} }
	switch v := v.(type) {
	case int64:
		return text("int64", strconv.FormatInt(v, 10))
	case float64:
		return text("float64", strconv.FormatFloat(v, 'g', -1, 64))
	case bool:
		return text("bool", strconv.FormatBool(v))
	case string:
		return text("string", v)
	case []byte:
		if v == nil {
			return typedValue{T: "bytes"} // a nil []byte, not an empty one
		}
		return text("bytes", base64.StdEncoding.EncodeToString(v))
	case time.Time:
		return text("time", v.Format(time.RFC3339Nano))
	case int, int8, int16, int32, uint, uint16, uint32, uint64:
		return text(fmt.Sprintf("%T", v), fmt.Sprint(v))
	case float32:
		return text("float32", strconv.FormatFloat(float64(v), 'g', -1, 32))
	}
	return typedValue{T: "null"}
}

// decodeArg reads one argument of a hot set.
func decodeArg(a typedValue) (driver.Value, error) {
	if a.T == "null" {
		if a.V != nil {
			return nil, errors.New("null with a value")
		}
		return nil, nil
	}
	if a.V == nil {
		if a.T == "bytes" {
			return []byte(nil), nil
		}
		return nil, fmt.Errorf("%q without a value", a.T)
	}
	v := *a.V
	switch a.T {
	case "int64":
		return strconv.ParseInt(v, 10, 64)
	case "float64":
		return strconv.ParseFloat(v, 64)
	case "bool":
		return strconv.ParseBool(v)
	case "string":
		return v, nil
	case "bytes":
		return base64.StdEncoding.DecodeString(v)
	case "time":
		return time.Parse(time.RFC3339Nano, v)
	case "float32":
		f, err := strconv.ParseFloat(v, 32)
		return float32(f), err
	}
	if conv, ok := goInts[a.T]; ok {
		return conv(v)
	}
	return nil, fmt.Errorf("unknown type %q", a.T)
}

// goInts read Go's integer types other than int64, which drivers such as
// pgx take as they are (so they are part of a key as they are).
var goInts = map[string]func(string) (driver.Value, error){
	"int":    signed(strconv.IntSize, func(n int64) driver.Value { return int(n) }),
	"int8":   signed(8, func(n int64) driver.Value { return int8(n) }),
	"int16":  signed(16, func(n int64) driver.Value { return int16(n) }),
	"int32":  signed(32, func(n int64) driver.Value { return int32(n) }),
	"uint":   unsigned(strconv.IntSize, func(n uint64) driver.Value { return uint(n) }),
	"uint16": unsigned(16, func(n uint64) driver.Value { return uint16(n) }),
	"uint32": unsigned(32, func(n uint64) driver.Value { return uint32(n) }),
	"uint64": unsigned(64, func(n uint64) driver.Value { return n }),
}

func signed(bits int, of func(int64) driver.Value) func(string) (driver.Value, error) {
	return func(s string) (driver.Value, error) {
		n, err := strconv.ParseInt(s, 10, bits)
		return of(n), err
	}
}

func unsigned(bits int, of func(uint64) driver.Value) func(string) (driver.Value, error) {
	return func(s string) (driver.Value, error) {
		n, err := strconv.ParseUint(s, 10, bits)
		return of(n), err
	}
}

// readHotSet reads and checks a hot set, untrusted: at most maxBytes of
// it, its format and version, and keeps at most n statements of at most m
// keys, each within the bounds SaveHotSet writes (a text of 16 KiB, 256
// arguments in 1 KiB); a key or a statement out of bounds is dropped.
func readHotSet(r io.Reader, n, m int) (*hotSet, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxHotSetBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadHotSet, err)
	}
	if len(data) > maxHotSetBytes {
		return nil, fmt.Errorf("%w: over %d bytes", ErrBadHotSet, maxHotSetBytes)
	}
	return parseHotSet(data, n, m)
}

// parseHotSet is readHotSet on data.
func parseHotSet(data []byte, n, m int) (*hotSet, error) {
	var hs hotSet
	if err := json.Unmarshal(data, &hs); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadHotSet, err)
	}
	if hs.Format != hotSetFormat || hs.Version != hotSetVersion {
		return nil, fmt.Errorf("%w: format %q version %d (want %q version %d)", ErrBadHotSet,
			hs.Format, hs.Version, hotSetFormat, hotSetVersion)
	}
	out := hs.Statements[:0]
	for _, st := range hs.Statements {
		if len(out) >= min(n, maxHotStatements) {
			break
		}
		if st.Text == "" || len(st.Text) > maxWarmText {
			continue
		}
		keys := st.Keys[:0]
		for _, k := range st.Keys {
			if len(keys) >= min(m, hotKeyCapacity) {
				break
			}
			if raw, ok := decodeArgs(k.Args); ok {
				k.raw = raw
				keys = append(keys, k)
			}
		}
		if len(keys) > 0 {
			st.Keys = keys
			out = append(out, st)
		}
	}
	hs.Statements = out
	return &hs, nil
}

// decodeArgs reads a key's arguments, within the bounds of rawArgs.
func decodeArgs(args []typedValue) ([]driver.Value, bool) {
	if len(args) > maxHotArgs {
		return nil, false
	}
	raw := make([]driver.Value, len(args))
	size := 0
	for i, a := range args {
		v, err := decodeArg(a)
		if err != nil {
			return nil, false
		}
		switch v := v.(type) {
		case string:
			size += len(v)
		case []byte:
			size += len(v)
		default:
			size += 8
		}
		if size > maxWarmArgs {
			return nil, false
		}
		raw[i] = v
	}
	return raw, true
}
