package sqlflight

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/resultset"
	"github.com/sqlflight/sqlflight/internal/seal"
	"github.com/sqlflight/sqlflight/internal/shared"
	"github.com/sqlflight/sqlflight/internal/wire"
)

// typicalEntry is an entry of a typical n-row result of six columns, as an
// origin fills it.
func typicalEntry(n int) *entry {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rs := resultSet{
		Names: []string{"id", "email", "balance", "active", "created_at", "avatar"},
		Cols: []column{
			{ScanType: reflect.TypeFor[int64](), DBType: "INT8", NullOK: true},
			{ScanType: reflect.TypeFor[string](), DBType: "TEXT", Nullable: true, NullOK: true},
			{ScanType: reflect.TypeFor[float64](), DBType: "NUMERIC", Precision: 12, Scale: 2, PrecisionScaleOK: true},
			{ScanType: reflect.TypeFor[bool](), DBType: "BOOL"},
			{ScanType: reflect.TypeFor[time.Time](), DBType: "TIMESTAMPTZ"},
			{ScanType: reflect.TypeFor[[]byte](), DBType: "BYTEA", Length: 1 << 20, LengthOK: true},
		},
		N: n,
	}
	for i := range n {
		var avatar driver.Value
		if i%3 != 0 {
			avatar = make([]byte, 64)
		}
		rs.Vals = append(rs.Vals, int64(100000+i), fmt.Sprintf("user%02d@example.com", i), float64(i)*12.34,
			i%2 == 0, now.Add(time.Duration(i)*time.Hour), avatar)
	}
	res := &result{Mask: 0x1f, Sets: []resultSet{rs}}
	return &entry{res: res, filled: now, soft: now.Add(time.Second), hard: now.Add(time.Minute),
		last: now.Add(2 * time.Minute), delta: time.Millisecond}
}

// sharedBody is the body of e's tier value: what shared.Decode reads once
// the value's seal is checked.
func sharedBody(t testing.TB, e *entry) []byte {
	t.Helper()
	b, err := shared.Encode(shared.Entry{Res: e.res, Filled: e.filled, Soft: e.soft, Hard: e.hard, Last: e.last, Delta: e.delta})
	if err != nil {
		t.Fatal(err)
	}
	return b[seal.Prefix:]
}

// decodeLimits are the bounds of a value read from the tier for a reader
// of policy pol, as fetchShared sets them.
func decodeLimits(s *Shield, pol Policy) wire.Limits {
	return shared.Limits(pol.MaxRows, pol.MaxBytes, s.opts.MaxResultRows, s.opts.MaxResultBytes)
}

// The reader's own policy bounds what it reads from the tier: a value its
// policy would not have shared from its own origin is a miss.
func TestDecodeSharedPolicyLimits(t *testing.T) {
	s := New(Options{MaxResultRows: 100, MaxResultBytes: 1 << 20})
	v := sharedBody(t, typicalEntry(10))
	big := typicalEntry(1)
	big.res.Sets[0].Vals[5] = make([]byte, 200<<10)
	vbig := sharedBody(t, big)
	for _, c := range []struct {
		pol      Policy
		v        []byte
		rejected bool
	}{
		{Policy{}, v, false},
		{Policy{MaxRows: 5}, v, true},
		{Policy{MaxRows: 10}, v, false},
		{Policy{}, vbig, false},
		{Policy{MaxBytes: 100 << 10}, vbig, true},
		{Policy{MaxRows: 1000, MaxBytes: 300 << 10}, vbig, false},
	} {
		_, err := shared.Decode(c.v, decodeLimits(s, c.pol))
		if c.rejected != errors.Is(err, wire.ErrLimit) || (!c.rejected && err != nil) {
			t.Errorf("policy %+v, %d bytes: %v", c.pol, len(c.v), err)
		}
	}
}

// TestResultsWithinTheLimitDecode: a result the origin judged within a
// byte limit decodes from the tier within the same policy's limit, whatever
// its shape: the origin counts values as the decoder charges them.
func TestResultsWithinTheLimitDecode(t *testing.T) {
	const limit = 64 << 10
	shapes := map[string]func(i int) []driver.Value{
		"ints":          func(i int) []driver.Value { return []driver.Value{int64(i)} },
		"short strings": func(i int) []driver.Value { return []driver.Value{"ab", int64(i), nil, true} },
		"empty bytes":   func(i int) []driver.Value { return []driver.Value{[]byte{}, []byte(nil)} },
		"times":         func(i int) []driver.Value { return []driver.Value{time.Unix(int64(i), 0).UTC()} },
	}
	for name, row := range shapes {
		t.Run(name, func(t *testing.T) {
			// As many rows as the origin accepts under limit.
			var rows [][]driver.Value
			for n := int64(0); ; {
				r := row(len(rows))
				for _, v := range r {
					_, sz, _ := resultset.CopyValue(v, true)
					n += sz
				}
				if n > limit-int64(len(r))*96 {
					break
				}
				rows = append(rows, r)
			}
			cols := make([]string, len(rows[0]))
			for i := range cols {
				cols[i] = fmt.Sprintf("c%d", i)
			}
			res, handoff, err := materialize(&fakeRows{cols: cols, rows: rows}, limits{Rows: 1 << 30, Bytes: limit})
			if err != nil || handoff != nil {
				t.Fatalf("the origin refused %d rows: %v", len(rows), err)
			}
			now := time.Now()
			e := &entry{res: res, filled: now, soft: now.Add(time.Second), hard: now.Add(time.Minute), last: now.Add(time.Minute)}
			s := New()
			if _, err := shared.Decode(sharedBody(t, e), wire.Limits{MaxBytes: 1 << 30}); err != nil {
				t.Fatalf("unlimited: %v", err)
			}
			if _, err := shared.Decode(sharedBody(t, e), decodeLimits(s, Policy{MaxBytes: limit})); err != nil {
				t.Fatalf("%d rows the origin accepted (%d bytes counted) refused from the tier: %v", len(rows), res.Bytes, err)
			}
		})
	}
}
