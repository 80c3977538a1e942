package sqlflight

import (
	"bytes"
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
	"strconv"
	"time"

	"github.com/sqlflight/sqlflight/internal/stats"
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
//
// With a fleet secret (Options.SharedSecret), SaveHotSet seals the hot set
// in an envelope:
//
//	{"format": "sqlflight-hotset-sealed", "version": 1,
//	 "mac": "9c1e…",
//	 "hotset": {"format": "sqlflight-hotset", "version": 1, …}}
//
// mac is the hex of HMAC-SHA256, under the hot set key of the secret
// (hotSetKey), of the bytes of hotset's value exactly as they stand in the
// file, from its "{" to its "}". Prewarm checks the MAC over those very
// bytes and then reads those very bytes: nothing is encoded again, so no
// two readings of one file can differ.

const (
	hotSetFormat  = "sqlflight-hotset"
	hotSetVersion = 1

	// Defaults and hard bounds of a hot set: statements, keys per
	// statement, arguments per key, and the bytes of a snapshot.
	defaultHotStatements = 32
	maxHotStatements     = 256
	maxHotArgs           = 256
	maxHotSetBytes       = 8 << 20

	// The envelope of a sealed hot set.
	sealedHotSetFormat  = "sqlflight-hotset-sealed"
	sealedHotSetVersion = 1
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

// ErrHotSetUnsealed is wrapped by the error of Prewarm when the hot set it
// is given (PrewarmOptions.From) does not carry a seal that verifies under
// the Shield's fleet secret (Options.SharedSecret, or
// SharedPreviousSecret): the seal is missing, its MAC is wrong (the file
// was changed after SaveHotSet wrote it, or sealed under another secret),
// or the Shield has no secret to check it with. Nothing of such a file is
// replayed, unless PrewarmOptions.TrustFile says that only the
// application can write it.
var ErrHotSetUnsealed = errors.New("sqlflight: hot set not sealed by this fleet")

// SaveHotSet writes the Shield's hot set to w: its 32 hottest statements
// that are shared and cached under a TTL, each with its hottest keys
// whose arguments are plain values within 1 KiB (at most 8 per
// statement), in the JSON format the README describes ("Pre-warming after
// a deploy"). Statements whose text exceeds 16 KiB are left out. Call it
// on shutdown, and give the file to Prewarm in the next instance. The
// snapshot holds the arguments of the hottest keys: keep it as you keep
// the application's logs, or better.
//
// With a fleet secret (Options.SharedSecret), the hot set is sealed: a
// MAC under a key derived from the secret covers its exact bytes, and
// Prewarm replays it only if the MAC verifies under SharedSecret or
// SharedPreviousSecret. Without a secret it is written unsealed, and
// Prewarm refuses it (ErrHotSetUnsealed) unless PrewarmOptions.TrustFile
// is set. A secret shorter than MinSharedSecret is an error wrapping
// ErrNoSharedSecret, and nothing is written.
func (s *Shield) SaveHotSet(w io.Writer) error {
	keys, err := hotSetKeys(&s.opts)
	if err != nil {
		return err
	}
	hs := s.hotSet(defaultHotStatements, hotKeyCapacity)
	if len(keys) == 0 {
		enc := json.NewEncoder(w)
		enc.SetIndent("", " ")
		return enc.Encode(hs)
	}
	_, err = w.Write(sealHotSet(hs, keys[0]))
	return err
}

// sealHotSet returns hs in the sealed envelope, its MAC under key.
func sealHotSet(hs *hotSet, key []byte) []byte {
	body, err := json.MarshalIndent(hs, " ", " ")
	if err != nil {
		panic("sqlflight: a hot set does not encode: " + err.Error()) // only plain strings and numbers
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "{\"format\": %q, \"version\": %d,\n \"mac\": %q,\n \"hotset\": ",
		sealedHotSetFormat, sealedHotSetVersion, hex.EncodeToString(hotSetMAC(key, body)))
	b.Write(body)
	b.WriteString("}\n")
	return b.Bytes()
}

// hotSetKey derives the key that seals hot sets from a fleet secret:
// HKDF-SHA256 with a salt and a label of its own, so that it is
// independent of every key the shared tier derives from the same secret
// (internal/seal): a MAC of one never passes for the other's.
func hotSetKey(secret string) []byte {
	k, err := hkdf.Key(sha256.New, []byte(secret), []byte("sqlflight hot set"), "hot set mac v1", 32)
	if err != nil {
		panic("sqlflight: " + err.Error()) // only for lengths out of HKDF's range
	}
	return k
}

// hotSetKeys returns the hot set keys of o's secrets, the current one
// first (it seals) and then the previous one (it only verifies): none
// without a secret, or an error wrapping ErrNoSharedSecret for a secret
// shorter than MinSharedSecret.
func hotSetKeys(o *Options) ([][]byte, error) {
	switch {
	case o.SharedSecret == "":
		return nil, nil
	case len(o.SharedSecret) < MinSharedSecret:
		return nil, fmt.Errorf("%w: SharedSecret is shorter than %d bytes: the hot set cannot be sealed", ErrNoSharedSecret, MinSharedSecret)
	case o.SharedPreviousSecret != "" && len(o.SharedPreviousSecret) < MinSharedSecret:
		return nil, fmt.Errorf("%w: SharedPreviousSecret is shorter than %d bytes", ErrNoSharedSecret, MinSharedSecret)
	}
	keys := [][]byte{hotSetKey(o.SharedSecret)}
	if o.SharedPreviousSecret != "" && o.SharedPreviousSecret != o.SharedSecret {
		keys = append(keys, hotSetKey(o.SharedPreviousSecret))
	}
	return keys, nil
}

// hotSetMAC is the MAC of a hot set's bytes under key.
func hotSetMAC(key, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write(body)
	return h.Sum(nil)
}

// hotSetFile is what Prewarm first reads of a file: the envelope of a
// sealed hot set, or (Format hotSetFormat, without MAC and HotSet) an
// unsealed one. HotSet keeps the bytes of its value as they are in the
// file: they are what the MAC covers and what is then read.
type hotSetFile struct {
	Format  string          `json:"format"`
	Version int             `json:"version"`
	MAC     string          `json:"mac"`
	HotSet  json.RawMessage `json:"hotset"`
}

// openHotSet returns the hot set in data, a file read whole: the body of a
// sealed one once its MAC verifies under one of keys, or an unsealed one
// as it is. Unless trust, an unsealed file, a sealed one whose MAC does
// not verify, and any file when keys is empty are refused with
// ErrHotSetUnsealed; with trust, no seal is checked. A file that is not a
// hot set fails with ErrBadHotSet.
func openHotSet(data []byte, keys [][]byte, trust bool) ([]byte, error) {
	var f hotSetFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadHotSet, err)
	}
	switch {
	case f.Format == hotSetFormat && f.Version == hotSetVersion:
		if !trust {
			return nil, fmt.Errorf("%w: the file carries no seal (%s)", ErrHotSetUnsealed, unsealedAdvice(keys))
		}
		return data, nil
	case f.Format != sealedHotSetFormat || f.Version != sealedHotSetVersion:
		return nil, fmt.Errorf("%w: format %q version %d (want %q version %d, or %q version %d)", ErrBadHotSet,
			f.Format, f.Version, hotSetFormat, hotSetVersion, sealedHotSetFormat, sealedHotSetVersion)
	case trust:
		return f.HotSet, nil
	case len(keys) == 0:
		return nil, fmt.Errorf("%w: the Shield has no SharedSecret to verify its seal with", ErrHotSetUnsealed)
	}
	mac, err := hex.DecodeString(f.MAC)
	if err != nil || len(mac) != sha256.Size {
		return nil, fmt.Errorf("%w: the file's seal is missing or malformed", ErrHotSetUnsealed)
	}
	for _, k := range keys {
		if hmac.Equal(mac, hotSetMAC(k, f.HotSet)) {
			return f.HotSet, nil
		}
	}
	return nil, fmt.Errorf("%w: the seal does not verify: the file was changed after it was saved, or sealed under another secret", ErrHotSetUnsealed)
}

// unsealedAdvice says why a Shield got an unsealed hot set and what to do.
func unsealedAdvice(keys [][]byte) string {
	if len(keys) == 0 {
		return "the Shield has no SharedSecret, so SaveHotSet cannot seal: set one, or set PrewarmOptions.TrustFile if only the application can write the file"
	}
	return "SaveHotSet seals with the Shield's SharedSecret: this file was written without it, or stripped of its seal"
}

// hotSet returns the Shield's hot set: at most n statements of at most m
// keys each.
func (s *Shield) hotSet(n, m int) *hotSet {
	hs := &hotSet{Format: hotSetFormat, Version: hotSetVersion, Saved: s.opts.Clock.Now().UTC(), Statements: []hotStatement{}}
	for _, st := range s.statements.Snapshot() {
		if len(hs.Statements) >= n {
			break
		}
		p := st.Plan()
		if st.WarmText() == "" || p == nil || p.Reason != "" || !p.Cache {
			continue
		}
		hst := hotStatement{Fingerprint: st.Fingerprint(), Text: st.WarmText(), Policy: p.Policy(), Calls: st.Calls()}
		for _, k := range st.HotKeys() {
			raw, warm := stats.WarmArgs(k)
			if !warm || len(hst.Keys) >= m {
				continue
			}
			hst.Keys = append(hst.Keys, hotKeyArgs{Calls: k.Calls, Args: encodeArgs(raw), raw: raw})
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

// readHotSet reads and checks a hot set file, untrusted: at most
// maxHotSetBytes of it, its seal under keys unless trust (openHotSet), its
// format and version, and keeps at most n statements of at most m keys,
// each within the bounds SaveHotSet writes (a text of 16 KiB, 256
// arguments in 1 KiB); a key or a statement out of bounds is dropped.
func readHotSet(r io.Reader, keys [][]byte, trust bool, n, m int) (*hotSet, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxHotSetBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadHotSet, err)
	}
	if len(data) > maxHotSetBytes {
		return nil, fmt.Errorf("%w: over %d bytes", ErrBadHotSet, maxHotSetBytes)
	}
	body, err := openHotSet(data, keys, trust)
	if err != nil {
		return nil, err
	}
	return parseHotSet(body, n, m)
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
