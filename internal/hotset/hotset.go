// Package hotset is the file format of a hot set: the hottest keys of the
// statements a Shield caches, saved so that a new instance can warm its
// cache before it takes traffic (the root's SaveHotSet and Prewarm). It
// is JSON:
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
//
// With a fleet secret (Options.SharedSecret), SaveHotSet seals the hot set
// in an envelope:
//
//	{"format": "sqlflight-hotset-sealed", "version": 1,
//	 "mac": "9c1e…",
//	 "hotset": {"format": "sqlflight-hotset", "version": 1, …}}
//
// mac is the hex of HMAC-SHA256, under the hot set key of the secret
// (SealKey), of the bytes of hotset's value exactly as they stand in the
// file, from its "{" to its "}". Prewarm checks the MAC over those very
// bytes and then reads those very bytes: nothing is encoded again, so no
// two readings of one file can differ.
//
// Reading is for untrusted input: Read takes at most MaxBytes, checks the
// seal (Open) before anything is decoded, and keeps what Parse's Limits
// allow; an argument comes back as exactly the Go value it was saved from,
// or its key is dropped.
//
// Build makes a hot set of the Shield's statement statistics, Merge folds
// one into the fleet's (kept in the shared tier under FleetKey), and a
// Warmer replays one on a scope: it judges each statement again through
// its Target, the Shield's side (as if the application sent it now), and
// lets the Target warm the keys of those it does not refuse, a bounded
// number at a time; it counts and reports, and never reaches the cache nor
// the database itself. Everything here but a Warmer's fields is safe for
// concurrent use.
package hotset

import (
	"bytes"
	"cmp"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"database/sql/driver"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"
)

// The format of a hot set, and of the envelope of a sealed one.
const (
	Format  = "sqlflight-hotset"
	Version = 1

	// Defaults and hard bounds of a hot set: statements, keys per
	// statement, arguments per key, and the bytes of a snapshot.
	DefaultStatements = 32
	MaxStatements     = 256
	MaxArgs           = 256
	MaxBytes          = 8 << 20

	// The envelope of a sealed hot set.
	SealedFormat  = "sqlflight-hotset-sealed"
	SealedVersion = 1
)

// Set is a hot set: its statements, hottest first.
type Set struct {
	Format     string      `json:"format"`
	Version    int         `json:"version"`
	Saved      time.Time   `json:"saved"`
	Statements []Statement `json:"statements"`
}

// Statement is one statement of a hot set: its text as the application
// sent it, and its hottest keys.
type Statement struct {
	Fingerprint string    `json:"fingerprint"`
	Text        string    `json:"text"`
	Policy      string    `json:"policy,omitempty"`
	Calls       uint64    `json:"calls"`
	Keys        []KeyArgs `json:"keys"`
}

// KeyArgs is one key of a statement: its count and arguments.
type KeyArgs struct {
	Calls uint64  `json:"calls"`
	Args  []Value `json:"args"`
	// Raw are the arguments as Go values: decoded by Parse, given by the
	// writer (EncodeArgs of them is Args).
	Raw []driver.Value `json:"-"`
}

// Value is one argument: its type and its value in text (none for "null"
// and for a nil []byte).
type Value struct {
	T string  `json:"t"`
	V *string `json:"v,omitempty"`
}

// ErrBad is wrapped by the error of Prewarm when its hot set cannot
// be read: not JSON, another format or version, or over its bounds.
var ErrBad = errors.New("sqlflight: bad hot set")

// ErrUnsealed is wrapped by the error of Prewarm when the hot set it
// is given (PrewarmOptions.From) does not carry a seal that verifies under
// the Shield's fleet secret (Options.SharedSecret, or
// SharedPreviousSecret): the seal is missing, its MAC is wrong (the file
// was changed after SaveHotSet wrote it, or sealed under another secret),
// or the Shield has no secret to check it with. Nothing of such a file is
// replayed, unless PrewarmOptions.TrustFile says that only the
// application can write it.
var ErrUnsealed = errors.New("sqlflight: hot set not sealed by this fleet")

// Seal returns hs in the sealed envelope, its MAC under key.
func Seal(hs *Set, key []byte) []byte {
	body, err := json.MarshalIndent(hs, " ", " ")
	if err != nil {
		panic("sqlflight: a hot set does not encode: " + err.Error()) // only plain strings and numbers
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "{\"format\": %q, \"version\": %d,\n \"mac\": %q,\n \"hotset\": ",
		SealedFormat, SealedVersion, hex.EncodeToString(macOf(key, body)))
	b.Write(body)
	b.WriteString("}\n")
	return b.Bytes()
}

// SealKey derives the key that seals hot sets from a fleet secret:
// HKDF-SHA256 with a salt and a label of its own, so that it is
// independent of every key the shared tier derives from the same secret
// (internal/seal): a MAC of one never passes for the other's.
func SealKey(secret string) []byte {
	k, err := hkdf.Key(sha256.New, []byte(secret), []byte("sqlflight hot set"), "hot set mac v1", 32)
	if err != nil {
		panic("sqlflight: " + err.Error()) // only for lengths out of HKDF's range
	}
	return k
}

// macOf is the MAC of a hot set's bytes under key.
func macOf(key, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write(body)
	return h.Sum(nil)
}

// file is what Prewarm first reads of a file: the envelope of a
// sealed hot set, or (Format Format, without MAC and HotSet) an
// unsealed one. HotSet keeps the bytes of its value as they are in the
// file: they are what the MAC covers and what is then read.
type file struct {
	Format  string          `json:"format"`
	Version int             `json:"version"`
	MAC     string          `json:"mac"`
	HotSet  json.RawMessage `json:"hotset"`
}

// Open returns the hot set in data, a file read whole: the body of a
// sealed one once its MAC verifies under one of keys, or an unsealed one
// as it is. Unless trust, an unsealed file, a sealed one whose MAC does
// not verify, and any file when keys is empty are refused with
// ErrUnsealed; with trust, no seal is checked. A file that is not a
// hot set fails with ErrBad.
func Open(data []byte, keys [][]byte, trust bool) ([]byte, error) {
	var f file
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBad, err)
	}
	switch {
	case f.Format == Format && f.Version == Version:
		if !trust {
			return nil, fmt.Errorf("%w: the file carries no seal (%s)", ErrUnsealed, unsealedAdvice(keys))
		}
		return data, nil
	case f.Format != SealedFormat || f.Version != SealedVersion:
		return nil, fmt.Errorf("%w: format %q version %d (want %q version %d, or %q version %d)", ErrBad,
			f.Format, f.Version, Format, Version, SealedFormat, SealedVersion)
	case trust:
		return f.HotSet, nil
	case len(keys) == 0:
		return nil, fmt.Errorf("%w: the Shield has no SharedSecret to verify its seal with", ErrUnsealed)
	}
	mac, err := hex.DecodeString(f.MAC)
	if err != nil || len(mac) != sha256.Size {
		return nil, fmt.Errorf("%w: the file's seal is missing or malformed", ErrUnsealed)
	}
	for _, k := range keys {
		if hmac.Equal(mac, macOf(k, f.HotSet)) {
			return f.HotSet, nil
		}
	}
	return nil, fmt.Errorf("%w: the seal does not verify: the file was changed after it was saved, or sealed under another secret", ErrUnsealed)
}

// unsealedAdvice says why a Shield got an unsealed hot set and what to do.
func unsealedAdvice(keys [][]byte) string {
	if len(keys) == 0 {
		return "the Shield has no SharedSecret, so SaveHotSet cannot seal: set one, or set PrewarmOptions.TrustFile if only the application can write the file"
	}
	return "SaveHotSet seals with the Shield's SharedSecret: this file was written without it, or stripped of its seal"
}

// EncodeArgs encodes arguments for a hot set (EncodeArg).
func EncodeArgs(raw []driver.Value) []Value {
	out := make([]Value, len(raw))
	for i, v := range raw {
		out[i] = EncodeArg(v)
	}
	return out
}

// EncodeArg encodes one argument, typed so that DecodeArg gives back the
// same Go value: the types the package doc lists; anything else is encoded
// as "null" (the writer saves only plain values).
func EncodeArg(v driver.Value) Value {
	text := func(t, s string) Value { return Value{T: t, V: &s} }
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
			return Value{T: "bytes"} // a nil []byte, not an empty one
		}
		return text("bytes", base64.StdEncoding.EncodeToString(v))
	case time.Time:
		return text("time", v.Format(time.RFC3339Nano))
	case int, int8, int16, int32, uint, uint16, uint32, uint64:
		return text(fmt.Sprintf("%T", v), fmt.Sprint(v))
	case float32:
		return text("float32", strconv.FormatFloat(float64(v), 'g', -1, 32))
	}
	return Value{T: "null"}
}

// DecodeArg reads one argument of a hot set: exactly the Go value
// EncodeArg was given, or an error for an unknown type, a missing value, or
// a text that does not parse as its type.
func DecodeArg(a Value) (driver.Value, error) {
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

// Limits are the bounds of what Parse keeps: a statement's text (Text
// bytes), the keys of a statement (Keys), and a key's arguments (ArgBytes:
// strings and byte slices by their length, any other value as 8).
type Limits struct{ Text, Keys, ArgBytes int }

// Read reads and checks a hot set file, untrusted: at most MaxBytes of it,
// its seal under keys unless trust (Open), its format and version, and
// keeps at most n statements of at most m keys within lim (Parse).
func Read(r io.Reader, keys [][]byte, trust bool, n, m int, lim Limits) (*Set, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBad, err)
	}
	if len(data) > MaxBytes {
		return nil, fmt.Errorf("%w: over %d bytes", ErrBad, MaxBytes)
	}
	body, err := Open(data, keys, trust)
	if err != nil {
		return nil, err
	}
	return Parse(body, n, m, lim)
}

// Parse reads a hot set of at most MaxBytes (its format and version
// checked) and keeps at most n statements (and never more than MaxStatements) of at most m keys
// (never more than lim.Keys) each: a statement without text or with a text
// over lim.Text bytes is dropped, and so is a key whose arguments do not
// decode (DecodeArgs) or exceed MaxArgs or lim.ArgBytes; a statement left
// without keys is dropped. It fails with ErrBad on anything but a hot set.
func Parse(data []byte, n, m int, lim Limits) (*Set, error) {
	if len(data) > MaxBytes {
		return nil, fmt.Errorf("%w: over %d bytes", ErrBad, MaxBytes)
	}
	var hs Set
	if err := json.Unmarshal(data, &hs); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBad, err)
	}
	if hs.Format != Format || hs.Version != Version {
		return nil, fmt.Errorf("%w: format %q version %d (want %q version %d)", ErrBad,
			hs.Format, hs.Version, Format, Version)
	}
	out := hs.Statements[:0]
	for _, st := range hs.Statements {
		if len(out) >= min(n, MaxStatements) {
			break
		}
		if st.Text == "" || len(st.Text) > lim.Text {
			continue
		}
		keys := st.Keys[:0]
		for _, k := range st.Keys {
			if len(keys) >= min(m, lim.Keys) {
				break
			}
			if raw, ok := DecodeArgs(k.Args, lim.ArgBytes); ok {
				k.Raw = raw
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

// DecodeArgs reads a key's arguments: at most MaxArgs of them, in
// maxBytes (strings and byte slices by their length, any other value as
// 8); false if one does not decode or they exceed a bound.
func DecodeArgs(args []Value, maxBytes int) ([]driver.Value, bool) {
	if len(args) > MaxArgs {
		return nil, false
	}
	raw := make([]driver.Value, len(args))
	size := 0
	for i, a := range args {
		v, err := DecodeArg(a)
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
		if size > maxBytes {
			return nil, false
		}
		raw[i] = v
	}
	return raw, true
}

// Merge merges b into a (statements by fingerprint and text, keys by
// arguments, each with the larger count) and keeps the n hottest
// statements with their m hottest keys.
func Merge(a, b *Set, n, m int) *Set {
	out := &Set{Format: Format, Version: Version, Saved: b.Saved}
	index := map[string]int{}
	for _, hs := range []*Set{a, b} {
		for _, st := range hs.Statements {
			id := st.Fingerprint + "\x00" + st.Text
			i, ok := index[id]
			if !ok {
				index[id] = len(out.Statements)
				st.Keys = slices.Clone(st.Keys)
				out.Statements = append(out.Statements, st)
				continue
			}
			mergeKeys(&out.Statements[i], st)
		}
	}
	slices.SortStableFunc(out.Statements, func(x, y Statement) int { return cmp.Compare(y.Calls, x.Calls) })
	out.Statements = out.Statements[:min(n, len(out.Statements))]
	for i := range out.Statements {
		keys := out.Statements[i].Keys
		slices.SortStableFunc(keys, func(x, y KeyArgs) int { return cmp.Compare(y.Calls, x.Calls) })
		out.Statements[i].Keys = keys[:min(m, len(keys))]
	}
	return out
}

// mergeKeys merges the keys and count of st into into.
func mergeKeys(into *Statement, st Statement) {
	into.Calls = max(into.Calls, st.Calls)
	into.Policy = st.Policy
	for _, k := range st.Keys {
		j := slices.IndexFunc(into.Keys, func(o KeyArgs) bool { return slices.EqualFunc(o.Args, k.Args, sameArg) })
		if j < 0 {
			into.Keys = append(into.Keys, k)
			continue
		}
		into.Keys[j].Calls = max(into.Keys[j].Calls, k.Calls)
	}
}

// sameArg reports whether a and b are the same argument.
func sameArg(a, b Value) bool {
	return a.T == b.T && (a.V == nil) == (b.V == nil) && (a.V == nil || *a.V == *b.V)
}
