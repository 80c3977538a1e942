package integration

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"reflect"
	"sync"
	"testing"
	"time"
)

// typesColumns is the hostile-values table; every column but id is NULL in
// the last row.
const typesColumns = `
	id    int PRIMARY KEY,
	b     bytea,
	jb    jsonb,
	j     json,
	n     numeric,
	f8    float8,
	f4    float4,
	i2    int2,
	i4    int4,
	i8    int8,
	bo    bool,
	tx    text,
	big   text,
	vc    varchar(40),
	tstz  timestamptz,
	tinf  timestamptz,
	ts    timestamp,
	tsinf timestamp,
	d     date,
	tm    time,
	iv    interval,
	ai    int[],
	at    text[],
	a2    int[],
	u     uuid,
	ip    inet`

// typesRows are INSERT value lists, in column order.
var typesRows = []string{
	`1, '\x00ff00fe41'::bytea,
	 '{"a": [1, 2.5, {"b": "ünïcødé ✓ 😀 עִבְרִית"}], "n": null, "t": true, "q": "say \"hi\"", "deep": {"x": {"y": {"z": [[], {}]}}}}',
	 '{"z": 1,  "a" : [ ], "a": "duplicate keys and spacing kept"}',
	 '123456789012345678901234567890.123456789012345678901234567890',
	 1.7976931348623157e308, 3.4028235e38,
	 32767, 2147483647, 9223372036854775807, true,
	 'héllo wörld — 日本語 👩‍👩‍👧 e' || chr(769) || ' tab' || chr(9) || 'nl' || chr(10) || '"dq" ''sq'' \ backslash',
	 repeat('0123456789abcdéf', 61681),
	 'varchar ✓',
	 '2021-03-04 05:06:07.123456+05:30', 'infinity',
	 '2021-03-04 05:06:07.123456', 'infinity',
	 '2021-03-04', '23:59:59.999999', '1 year 2 mons 3 days 04:05:06.789012',
	 '{1,2,3}', '{"a","with \"quote\"",NULL,"NULL","",", comma","{brace}"}', '{{1,2},{3,4}}',
	 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '2001:db8::1/64'`,
	`2, ''::bytea, '[]', '"just a string"', 'NaN', 'NaN', 'NaN',
	 -32768, -2147483648, -9223372036854775808, false,
	 '', '', '',
	 '2000-01-01 00:00:00-08:00', '-infinity',
	 '1999-12-31 23:59:59', '-infinity',
	 '0001-01-01', '00:00:00', '-1 mons -2 days -00:00:00.000001',
	 '{}', '{}', '{{NULL,-1},{0,1}}',
	 '00000000-0000-0000-0000-000000000000', '10.1.2.3'`,
	`3, '\xffffffff00000000'::bytea, '{"":""}', 'null',
	 '-99999999999999999999999999999999999999.000000000000000000000000000000000001',
	 'Infinity', '-Infinity', 0, 0, 0, true,
	 'right-to-left ‏עברית‎ and zero width ​ space', repeat('z', 3), 'x',
	 '2021-07-01 12:00:00 America/St_Johns', '1970-01-01 00:00:00+00',
	 '2038-01-19 03:14:08', '1970-01-01 00:00:00',
	 '9999-12-31', '12:34:56', '0 seconds',
	 '{-1,NULL,1}', '{NULL}', '{{7}}',
	 'ffffffff-ffff-ffff-ffff-ffffffffffff', '0.0.0.0/0'`,
	`4, '\x00'::bytea, '{"big": 12345678901234567890123, "f": 1.0e-10}', '[1, "two", null]',
	 '-0.000000000000000000000000000001', '-Infinity', 1.4e-45,
	 -1, -1, -1, false,
	 'plain', 'p', 'p',
	 '1969-12-31 23:59:59.999999-00:30', '2021-03-04 05:06:07.123456+05:30',
	 '2000-02-29 12:00:00', '2000-02-29 12:00:00',
	 '2000-02-29', '00:00:00.000001', '1 mons 1 days 00:00:00.000001',
	 '{0}', '{"quote''s"}', '{{1,2,3},{4,5,6}}',
	 '123e4567-e89b-12d3-a456-426614174000', '::1'`,
	`5, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
	 NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL`,
}

// scanMode is how a caller scans each row.
type scanMode int

const (
	scanAny      scanMode = iota // every column into *any
	scanRawBytes                 // every column into *sql.RawBytes (copied at once)
	scanTyped                    // natural typed destinations
)

func (m scanMode) String() string {
	return [...]string{"any", "rawbytes", "typed"}[m]
}

// typedDest returns a typed destination for a column of the types table.
func typedDest(col string) any {
	switch col {
	case "id":
		return new(int64)
	case "b", "j":
		return new([]byte)
	case "f8", "f4":
		return new(sql.NullFloat64)
	case "i2":
		return new(sql.NullInt16)
	case "i4":
		return new(sql.NullInt32)
	case "i8":
		return new(sql.NullInt64)
	case "bo":
		return new(sql.NullBool)
	case "tstz", "ts", "d":
		return new(sql.NullTime)
	default: // strings of every other kind: numeric, text, json, times, arrays, …
		return new(sql.NullString)
	}
}

// colType is what database/sql reports about a result column.
type colType struct {
	Name             string
	DatabaseTypeName string
	ScanType         reflect.Type
	Length           int64
	LengthOK         bool
	Precision, Scale int64
	DecimalOK        bool
	Nullable         bool
	NullableOK       bool
}

// result is everything one caller observed.
type result struct {
	cols  []colType
	rows  [][]any
	errs  []string // per-row Scan error ("" when none)
	final error
}

func columnTypes(rows *sql.Rows) ([]colType, error) {
	cts, err := rows.ColumnTypes()
	if err != nil {
		return nil, err
	}
	out := make([]colType, len(cts))
	for i, ct := range cts {
		c := colType{Name: ct.Name(), DatabaseTypeName: ct.DatabaseTypeName(), ScanType: ct.ScanType()}
		c.Length, c.LengthOK = ct.Length()
		c.Precision, c.Scale, c.DecimalOK = ct.DecimalSize()
		c.Nullable, c.NullableOK = ct.Nullable()
		out[i] = c
	}
	return out, nil
}

// readAll runs query and scans every row in mode.
func readAll(ctx context.Context, db *sql.DB, mode scanMode, query string, args ...any) result {
	var res result
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		res.final = err
		return res
	}
	defer rows.Close()
	res.cols, err = columnTypes(rows)
	if err != nil {
		res.final = err
		return res
	}
	names, err := rows.Columns()
	if err != nil {
		res.final = err
		return res
	}
	for rows.Next() {
		dest := make([]any, len(names))
		for i, name := range names {
			switch mode {
			case scanAny:
				dest[i] = new(any)
			case scanRawBytes:
				dest[i] = new(sql.RawBytes)
			case scanTyped:
				dest[i] = typedDest(name)
			}
		}
		errText := ""
		if err := rows.Scan(dest...); err != nil {
			errText = err.Error()
		}
		vals := make([]any, len(dest))
		for i, d := range dest {
			if rb, ok := d.(*sql.RawBytes); ok {
				// RawBytes are only valid until the next Next: copy them,
				// keeping nil (NULL) apart from empty.
				if *rb != nil {
					vals[i] = append([]byte{}, *rb...)
				} else {
					vals[i] = []byte(nil)
				}
				continue
			}
			vals[i] = reflect.ValueOf(d).Elem().Interface()
		}
		res.rows = append(res.rows, vals)
		res.errs = append(res.errs, errText)
	}
	res.final = rows.Err()
	return res
}

// sameTime: the same instant with the same UTC offset.
func sameTime(a, b time.Time) bool {
	_, oa := a.Zone()
	_, ob := b.Zone()
	return a.Equal(b) && oa == ob
}

// sameValue is reflect.DeepEqual, except that times compare as instants with
// offsets and floats compare by bits (so NaN equals NaN and -0 differs
// from 0).
func sameValue(a, b any) bool {
	switch x := a.(type) {
	case time.Time:
		y, ok := b.(time.Time)
		return ok && sameTime(x, y)
	case sql.NullTime:
		y, ok := b.(sql.NullTime)
		return ok && x.Valid == y.Valid && sameTime(x.Time, y.Time)
	case float64:
		y, ok := b.(float64)
		return ok && math.Float64bits(x) == math.Float64bits(y)
	case sql.NullFloat64:
		y, ok := b.(sql.NullFloat64)
		return ok && x.Valid == y.Valid && math.Float64bits(x.Float64) == math.Float64bits(y.Float64)
	}
	return reflect.DeepEqual(a, b)
}

func describe(v any) string {
	s := fmt.Sprintf("%T(%#v)", v, v)
	if len(s) > 200 {
		s = s[:200] + fmt.Sprintf("… (%d chars)", len(s))
	}
	return s
}

// compareResults reports every difference between want (the raw driver)
// and got (through sqlflight).
func compareResults(t *testing.T, who string, want, got result) {
	t.Helper()
	if (want.final == nil) != (got.final == nil) || (want.final != nil && want.final.Error() != got.final.Error()) {
		t.Errorf("%s: error %v, raw driver: %v", who, got.final, want.final)
	}
	if !reflect.DeepEqual(want.cols, got.cols) {
		for i := 0; i < len(want.cols) || i < len(got.cols); i++ {
			var w, g colType
			if i < len(want.cols) {
				w = want.cols[i]
			}
			if i < len(got.cols) {
				g = got.cols[i]
			}
			if !reflect.DeepEqual(w, g) {
				t.Errorf("%s: column %d type\n got %+v\nwant %+v", who, i, g, w)
			}
		}
	}
	if len(want.rows) != len(got.rows) {
		t.Errorf("%s: %d rows, raw driver %d", who, len(got.rows), len(want.rows))
		return
	}
	for r := range want.rows {
		if want.errs[r] != got.errs[r] {
			t.Errorf("%s: row %d scan error %q, raw driver %q", who, r, got.errs[r], want.errs[r])
		}
		for c := range want.rows[r] {
			if !sameValue(want.rows[r][c], got.rows[r][c]) {
				name := fmt.Sprint(c)
				if c < len(want.cols) {
					name = want.cols[c].Name
				}
				t.Errorf("%s: row %d column %s:\n got %s\nwant %s", who, r, name, describe(got.rows[r][c]), describe(want.rows[r][c]))
			}
		}
	}
}

func TestTypesRoundTrip(t *testing.T) {
	base := postgresDSN(t)
	// A session time zone with an odd offset, so that decoded times carry a
	// non-UTC, non-hour offset.
	base = withDSNParams(t, base, "timezone", "Asia/Kathmandu")
	admin := openRaw(t, base)
	table := "types_" + uniqueID(t)
	mustExec(t, admin, fmt.Sprintf("CREATE TABLE %s (%s)", table, typesColumns))
	cleanupExec(t, admin, "DROP TABLE IF EXISTS "+table)
	for _, r := range typesRows {
		mustExec(t, admin, fmt.Sprintf("INSERT INTO %s VALUES (%s)", table, r))
	}

	forEachExecMode(t, base, func(t *testing.T, dsn string) {
		ctx := testContext(t, testTimeout)
		raw := openRaw(t, dsn)
		g := newGate(t, admin, dsn, "gate")
		query := fmt.Sprintf(`/* sqlflight: coalesce pure=%[1]s name=types */ SELECT t.* FROM %[1]s() AS g CROSS JOIN %[2]s AS t ORDER BY t.id`, g.fn, table)

		want := map[scanMode]result{}
		for _, m := range []scanMode{scanAny, scanRawBytes, scanTyped} {
			r := readAll(ctx, raw, m, query)
			if r.final != nil {
				t.Fatalf("raw driver, scan %v: %v", m, r.final)
			}
			if len(r.rows) != len(typesRows) {
				t.Fatalf("raw driver, scan %v: %d rows, want %d", m, len(r.rows), len(typesRows))
			}
			want[m] = r
		}
		for i, e := range want[scanTyped].errs {
			if e != "" {
				t.Fatalf("raw driver: typed scan of row %d fails (fix the test's destinations): %s", i, e)
			}
		}

		// One shared flight; callers scan it three different ways.
		db, sh := openFlight(t, dsn)
		const callers = 9
		before := sh.Stats()
		callsBefore := g.calls(t, admin)

		var wg sync.WaitGroup
		defer wg.Wait()
		g.close(t)
		defer g.open(t)
		got := make([]result, callers)
		for i := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[i] = readAll(ctx, db, scanMode(i%3), query)
			}()
		}
		waitUntil(t, time.Minute, func() string {
			return "all callers inside the flight: " + statsString(sh.Stats())
		}, func() bool { return sh.Stats().Waiting-before.Waiting >= callers })
		g.open(t)
		wg.Wait()

		for i, r := range got {
			compareResults(t, fmt.Sprintf("caller %d (scan %v)", i, scanMode(i%3)), want[scanMode(i%3)], r)
		}

		after := sh.Stats()
		if d := after.Flights - before.Flights; d != 1 {
			t.Errorf("flights: %d, want 1 (%s)", d, statsString(after))
		}
		if d := after.Followers - before.Followers; d != callers-1 {
			t.Errorf("followers: %d, want %d (%s)", d, callers-1, statsString(after))
		}
		if d := g.calls(t, admin) - callsBefore; d != 1 {
			t.Errorf("the query reached Postgres %d times, want 1", d)
		}
	})
}
