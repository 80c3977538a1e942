package sqlflight

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/sqlflight/sqlflight/internal/hotset"
)

// The secrets of the seal tests: 32 bytes each, as MinSharedSecret asks.
const (
	sealSecret = "hot-set-secret-0123456789abcdef!"
	sealNext   = "hot-set-secret-next-0123456789ab"
	sealOther  = "not-the-fleet-secret-0123456789!"
)

const sealQuery = "/* sqlflight: ttl=1m */ SELECT n FROM products WHERE id = $1"

// sealedSnapshot returns the hot set of a Shield under opts whose hot keys
// are ids 1, 2 and 3 of sealQuery.
// sealedEnvelope is the envelope of a sealed hot set, as a reader of the
// file sees it.
type sealedEnvelope struct {
	Format  string          `json:"format"`
	Version int             `json:"version"`
	MAC     string          `json:"mac"`
	HotSet  json.RawMessage `json:"hotset"`
}

// hmacSHA256 is the seal's MAC of body under key, computed apart.
func hmacSHA256(key, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write(body)
	return h.Sum(nil)
}

func sealedSnapshot(t *testing.T, opts Options) []byte {
	t.Helper()
	db, s := openWarm(t, &fakeDriver{}, opts)
	queryAll(t, db, sealQuery, [][]any{{int64(1)}, {int64(2)}, {int64(3)}}, 2)
	var buf bytes.Buffer
	if err := s.SaveHotSet(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// refusedUnsealed asserts that the Shield refuses data with
// ErrHotSetUnsealed, replays nothing and that nothing reached d.
func refusedUnsealed(t *testing.T, what string, s *Shield, db *sql.DB, d *fakeDriver, data []byte) {
	t.Helper()
	q, e := d.queries.Load(), d.execs.Load()
	origins := s.Stats().OriginExecutions
	rep, err := s.Prewarm(context.Background(), PrewarmOptions{DB: db, From: bytes.NewReader(data)})
	if !errors.Is(err, ErrHotSetUnsealed) {
		t.Errorf("%s: %v, want ErrHotSetUnsealed", what, err)
	}
	if rep != (PrewarmReport{}) {
		t.Errorf("%s: report %+v, want nothing done", what, rep)
	}
	if dq, de, do := d.queries.Load()-q, d.execs.Load()-e, s.Stats().OriginExecutions-origins; dq != 0 || de != 0 || do != 0 {
		t.Errorf("%s: the refused hot set reached the database: %d queries, %d execs, %d origin executions", what, dq, de, do)
	}
}

// TestHotSetSealRoundTrip: with a fleet secret SaveHotSet seals its hot
// set, and an instance of the same fleet replays it without TrustFile.
func TestHotSetSealRoundTrip(t *testing.T) {
	data := sealedSnapshot(t, Options{SharedSecret: sealSecret})
	var env sealedEnvelope
	if err := json.Unmarshal(data, &env); err != nil {
		t.Fatal(err)
	}
	if env.Format != hotset.SealedFormat || env.Version != 1 || len(env.MAC) != 64 || !bytes.Contains(env.HotSet, []byte(`"v": "2"`)) {
		t.Fatalf("not a sealed hot set:\n%s", data)
	}
	if mac, _ := hex.DecodeString(env.MAC); !bytes.Equal(mac, hmacSHA256(hotset.SealKey(sealSecret), env.HotSet)) {
		t.Fatal("the MAC is not over the exact bytes of hotset under the hot set key")
	}

	d := &fakeDriver{}
	db, s := openWarm(t, d, Options{SharedSecret: sealSecret})
	rep, err := s.Prewarm(context.Background(), PrewarmOptions{DB: db, From: bytes.NewReader(data)})
	if err != nil || rep.Replayed != 3 || rep.Statements != 1 {
		t.Fatalf("%+v %v", rep, err)
	}
	before := d.queries.Load()
	queryAll(t, db, sealQuery, [][]any{{int64(1)}, {int64(2)}, {int64(3)}}, 1)
	if n := d.queries.Load() - before; n != 0 {
		t.Fatalf("%d origin queries after pre-warming from the sealed hot set, want 0", n)
	}
}

// TestHotSetSealRefusesTampering: a sealed hot set changed in any way —
// any bit flipped, its statement rewritten, its seal removed or recomputed
// under another secret — is refused whole, and no statement of it runs.
func TestHotSetSealRefusesTampering(t *testing.T) {
	data := sealedSnapshot(t, Options{SharedSecret: sealSecret})
	d := &fakeDriver{}
	db, s := openWarm(t, d, Options{SharedSecret: sealSecret})

	var env sealedEnvelope
	if err := json.Unmarshal(data, &env); err != nil {
		t.Fatal(err)
	}
	hostile := bytes.Replace(data, []byte("SELECT n FROM products WHERE id = $1"), []byte("SELECT rolname, rolpassword FROM pg_authid WHERE $1 > 0"), 1)
	if bytes.Equal(hostile, data) {
		t.Fatal("the statement is not in the file")
	}
	refusedUnsealed(t, "a modified statement", s, db, d, hostile)
	refusedUnsealed(t, "a modified argument", s, db, d, bytes.Replace(data, []byte(`"v": "2"`), []byte(`"v": "9"`), 1))
	refusedUnsealed(t, "the seal removed", s, db, d, bytes.Replace(data, []byte(`"mac": "`+env.MAC+`",`), nil, 1))
	refusedUnsealed(t, "an empty seal", s, db, d, bytes.Replace(data, []byte(env.MAC), nil, 1))
	refusedUnsealed(t, "the envelope removed", s, db, d, env.HotSet)
	forged := hotset.Seal(hostileBody(t, env.HotSet), hotset.SealKey(sealOther))
	refusedUnsealed(t, "sealed under another secret", s, db, d, forged)

	// Every bit 0 of every byte, flipped: the file is refused, as
	// unsealed or as not a hot set, and nothing runs; a flip within the
	// hot set that leaves the file JSON is refused as unsealed.
	body := bytes.Index(data, env.HotSet)
	unsealed, valid := 0, 0
	for i := range data {
		flipped := bytes.Clone(data)
		flipped[i] ^= 1
		rep, err := s.Prewarm(context.Background(), PrewarmOptions{DB: db, From: bytes.NewReader(flipped)})
		inBody := i >= body && i < body+len(env.HotSet) && json.Valid(flipped)
		if inBody {
			valid++
		}
		switch {
		case errors.Is(err, ErrHotSetUnsealed):
			unsealed++
		case errors.Is(err, ErrBadHotSet) && !inBody:
		default:
			t.Fatalf("byte %d (%q) flipped: %+v %v, want it refused as unsealed", i, data[i], rep, err)
		}
	}
	if q, e := d.queries.Load(), d.execs.Load(); q != 0 || e != 0 || s.Stats().OriginExecutions != 0 {
		t.Fatalf("tampered hot sets reached the database: %d queries, %d execs", q, e)
	}
	if body < 0 || valid == 0 {
		t.Fatalf("no flip left the hot set JSON (body at %d)", body)
	}
	t.Logf("%d bytes flipped one by one, all refused: %d as unsealed (%d of them within the hot set, still JSON), the others as not JSON",
		len(data), unsealed, valid)

	// The file as it was is still replayed.
	rep, err := s.Prewarm(context.Background(), PrewarmOptions{DB: db, From: bytes.NewReader(data)})
	if err != nil || rep.Replayed != 3 {
		t.Fatalf("the sealed hot set itself: %+v %v", rep, err)
	}
}

// hostileBody returns the hot set body with its statement replaced by one
// that reads the server's password hashes.
func hostileBody(t *testing.T, body []byte) *hotset.Set {
	t.Helper()
	var hs hotset.Set
	if err := json.Unmarshal(body, &hs); err != nil || len(hs.Statements) == 0 {
		t.Fatalf("%v %s", err, body)
	}
	hs.Statements[0].Text = "/* sqlflight: ttl=1h */ SELECT rolname, rolpassword FROM pg_authid WHERE $1 > 0"
	return &hs
}

// TestHotSetSealPreviousSecret: during a rotation, a hot set sealed under
// the old secret verifies on an instance that has it as
// SharedPreviousSecret; such an instance seals under the new one, and one
// without the old secret refuses the old hot set.
func TestHotSetSealPreviousSecret(t *testing.T) {
	old := sealedSnapshot(t, Options{SharedSecret: sealSecret})
	rotating := Options{SharedSecret: sealNext, SharedPreviousSecret: sealSecret}

	d := &fakeDriver{}
	db, s := openWarm(t, d, rotating)
	rep, err := s.Prewarm(context.Background(), PrewarmOptions{DB: db, From: bytes.NewReader(old)})
	if err != nil || rep.Replayed != 3 {
		t.Fatalf("an old hot set during the rotation: %+v %v", rep, err)
	}

	d2 := &fakeDriver{}
	db2, s2 := openWarm(t, d2, Options{SharedSecret: sealNext})
	refusedUnsealed(t, "the old hot set after the rotation", s2, db2, d2, old)

	// What the rotating instance writes is sealed under the new secret.
	fresh := sealedSnapshot(t, rotating)
	rep, err = s2.Prewarm(context.Background(), PrewarmOptions{DB: db2, From: bytes.NewReader(fresh)})
	if err != nil || rep.Replayed != 3 {
		t.Fatalf("a hot set of the rotation on the new secret alone: %+v %v", rep, err)
	}
	d3 := &fakeDriver{}
	db3, s3 := openWarm(t, d3, Options{SharedSecret: sealSecret})
	refusedUnsealed(t, "a hot set of the new secret on the old one", s3, db3, d3, fresh)
}

// TestHotSetTrustFile: an unsealed hot set (a Shield without a secret
// writes one) is refused without TrustFile, on a Shield with or without a
// secret, and replayed with it; a Shield without a secret cannot verify a
// sealed one either.
func TestHotSetTrustFile(t *testing.T) {
	plain := sealedSnapshot(t, Options{})
	if env := (sealedEnvelope{}); json.Unmarshal(plain, &env) != nil || env.Format != hotset.Format || env.MAC != "" || env.HotSet != nil {
		t.Fatalf("a Shield without a secret wrote:\n%s", plain)
	}
	sealed := sealedSnapshot(t, Options{SharedSecret: sealSecret})

	for _, opts := range []Options{{}, {SharedSecret: sealSecret}} {
		d := &fakeDriver{}
		db, s := openWarm(t, d, opts)
		refusedUnsealed(t, "an unsealed hot set", s, db, d, plain)
		rep, err := s.Prewarm(context.Background(), PrewarmOptions{DB: db, From: bytes.NewReader(plain), TrustFile: true})
		if err != nil || rep.Replayed != 3 || d.queries.Load() != 3 {
			t.Fatalf("secret %t: a trusted unsealed hot set: %+v %v, %d queries", opts.SharedSecret != "", rep, err, d.queries.Load())
		}
	}

	// No secret: a sealed hot set cannot be verified, and is refused too.
	d := &fakeDriver{}
	db, s := openWarm(t, d)
	refusedUnsealed(t, "a sealed hot set on a Shield without a secret", s, db, d, sealed)
	// TrustFile checks no seal: the file is the application's word.
	rep, err := s.Prewarm(context.Background(), PrewarmOptions{DB: db, From: bytes.NewReader(sealed), TrustFile: true})
	if err != nil || rep.Replayed != 3 {
		t.Fatalf("a trusted sealed hot set without a secret: %+v %v", rep, err)
	}
	// TrustFile lifts no other bound: the statements are still judged.
	var env sealedEnvelope
	_ = json.Unmarshal(sealed, &env)
	write := hostileBody(t, env.HotSet)
	write.Statements[0].Text = "/* sqlflight: ttl=1h */ UPDATE products SET n = n + 1 WHERE id = $1"
	q, e := d.queries.Load(), d.execs.Load()
	rep, err = s.Prewarm(context.Background(), PrewarmOptions{DB: db, From: bytes.NewReader(hotset.Seal(write, hotset.SealKey(sealOther))), TrustFile: true})
	if err != nil || rep.Refused != 1 || d.queries.Load() != q || d.execs.Load() != e {
		t.Fatalf("a write in a trusted hot set: %+v %v", rep, err)
	}
}

// TestHotSetShortSecret: a secret shorter than MinSharedSecret seals
// nothing: SaveHotSet fails and writes nothing, and Prewarm refuses a file
// it cannot verify.
func TestHotSetShortSecret(t *testing.T) {
	d := &fakeDriver{}
	db, s := openWarm(t, d, Options{SharedSecret: "short"})
	queryAll(t, db, sealQuery, [][]any{{int64(1)}}, 2)
	var buf bytes.Buffer
	if err := s.SaveHotSet(&buf); !errors.Is(err, ErrNoSharedSecret) || buf.Len() != 0 {
		t.Fatalf("SaveHotSet with a short secret: %v, %d bytes written", err, buf.Len())
	}
	sealed := sealedSnapshot(t, Options{SharedSecret: sealSecret})
	s.InvalidateAll()
	q := d.queries.Load()
	_, err := s.Prewarm(context.Background(), PrewarmOptions{DB: db, From: bytes.NewReader(sealed)})
	if !errors.Is(err, ErrHotSetUnsealed) || !errors.Is(err, ErrNoSharedSecret) || d.queries.Load() != q {
		t.Fatalf("Prewarm with a short secret: %v", err)
	}
	if !strings.Contains(err.Error(), "shorter") {
		t.Errorf("the error does not say why: %v", err)
	}
}

// TestPrewarmOnlySeen: with OnlySeen, a statement of the hot set that the
// Shield's statistics do not know is refused; once the application sent
// it, it is replayed.
func TestPrewarmOnlySeen(t *testing.T) {
	sealed := sealedSnapshot(t, Options{SharedSecret: sealSecret})
	d := &fakeDriver{}
	db, s := openWarm(t, d, Options{SharedSecret: sealSecret})
	rep, err := s.Prewarm(context.Background(), PrewarmOptions{DB: db, From: bytes.NewReader(sealed), OnlySeen: true})
	if err != nil || rep.Refused != 1 || rep.Replayed != 0 || d.queries.Load() != 0 {
		t.Fatalf("an unseen statement: %+v %v, %d queries", rep, err, d.queries.Load())
	}
	readAll(t, db, sealQuery, int64(99)) // another key of the same statement
	q := d.queries.Load()
	rep, err = s.Prewarm(context.Background(), PrewarmOptions{DB: db, From: bytes.NewReader(sealed), OnlySeen: true})
	if err != nil || rep.Replayed != 3 || d.queries.Load()-q != 3 {
		t.Fatalf("a statement seen: %+v %v", rep, err)
	}
	// Without statement statistics nothing is known.
	d2 := &fakeDriver{}
	db2, s2 := openWarm(t, d2, Options{SharedSecret: sealSecret, NoStatementStats: true})
	readAll(t, db2, sealQuery, int64(99))
	rep, err = s2.Prewarm(context.Background(), PrewarmOptions{DB: db2, From: bytes.NewReader(sealed), OnlySeen: true})
	if err != nil || rep.Refused != 1 || rep.Replayed != 0 {
		t.Fatalf("OnlySeen without statistics: %+v %v", rep, err)
	}
}
