package integration

import (
	"database/sql"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight"
)

// The batch workload of TestDifferential: many keys of one statement read
// at once, so that reads of different keys overlap in time (and may run
// together as one statement), each caller owed exactly its own row, no
// older than its own call.
//
// Two tables: dif_bt (300 rows by int id) and dif_bs (240 rows by a text
// name: quotes, backslashes, commas, braces, spaces, "NULL", unicode, the
// empty string), each read by a parameter, by a key inlined in the
// statement's text as bun writes it (a quote doubled, a backslash as it
// is), and by a parameter in a statement written as an ORM writes it
// ("t"."id", parenthesised), read under ttl=1m alone. Every read returns
// (key, ver) rows: a read given another key's row, or more or less than
// one, is a wrong-row violation; its version is judged against the history
// as everywhere else.
//
// About a third of the keys (multiples of 3) are written; the others stay
// cached under the TTL policies while their neighbours change. Writes
// through the Shield (autocommit by parameter and by an inlined key,
// committed and rolled-back transactions of two rows, each transaction
// reading its own write through the workload's statements) and by an
// outside client on raw pgx (the same, behind the Shield's back), which
// the Shield learns of only through its change feed: logical replication
// of a publication of the two tables. A third of the written keys are
// written only from outside, so that under ttl=1m nothing but the feed
// ends their entries. Versions made outside are owed to a reader only
// within its policy, or diffFeedAllow when shorter (see
// differential_history_test.go).
//
// What makes it sensitive to batches that run too early: each write is
// preceded by reads of its key (kicked to the chasers, goroutines that read
// what they are kicked at once; a transaction kicks them again just before
// its COMMIT), so that a read of the key is often in flight as the write
// returns, and followed at once by reads of the key by every statement and
// of its neighbours, under random policies, whose calls all begin after
// the write returned: a batch that started before the write (or before
// their calls began) and answered one of them returns the version before
// the write, which the check reports as ryw (a write through the Shield)
// or, for one made outside, feed or stale. The readers pick a quarter of
// their keys at the key last written and a quarter next to it.
func diffBatch(t *testing.T, admin *sql.DB, id string) *diffClass {
	const ids, names, writers = 300, 240, 2
	bt, bs, pub := counterTable(t, admin, "dif_bt_"+id, ids), "dif_bs_"+id, "dif_bp_"+id
	nm := batchNames(names)
	mustExec(t, admin, fmt.Sprintf(`CREATE TABLE %s (name text PRIMARY KEY, ver bigint NOT NULL)`, bs))
	cleanupExec(t, admin, "DROP TABLE IF EXISTS "+bs)
	ctx := testContext(t, time.Minute)
	for _, n := range nm {
		if _, err := admin.ExecContext(ctx, fmt.Sprintf(`INSERT INTO %s (name, ver) VALUES ($1, 0)`, bs), n); err != nil {
			t.Fatalf("insert %q: %v", n, err)
		}
	}
	mustExec(t, admin, fmt.Sprintf(`CREATE PUBLICATION %s FOR TABLE %s, %s`, pub, bt, bs))
	cleanupExec(t, admin, "DROP PUBLICATION IF EXISTS "+pub)

	c := &diffClass{
		catches: "a batch of reads of one statement that answers a caller whose call began after it started (after a write that returned), " +
			"another key's row or not exactly one, keys mangled into one statement (text keys full of quotes, backslashes, commas, braces), " +
			"outside writes the change feed does not report",
		readers: 6,
		chasers: 6,
		kicks:   make(chan diffKick, 6),
		writers: writers,
		pause:   time.Millisecond,
		pool:    12,
		outside: true,
		// Mostly no annotation on a Shield that only coalesces by default,
		// as most applications read; TTLs, and ttl=1m, which only
		// invalidations keep fresh.
		policies: []uint8{polPlain, polPlain, polPlain, polCtxTTL, polTTL1s, polTTL1m},
	}
	c.options = func(o *sqlflight.Options, parent, dsn string) {
		o.Default = sqlflight.Policy{}
		o.MaxConns = 8
		o.Feed, o.FeedPublication = sqlflight.FeedReplication, pub
		if parent != "pgx" {
			o.FeedDSN = dsn // another driver's scope opens no feed connection of its own
		}
	}

	iBase := c.addObjs(bt, ids, 0, 0)
	sBase := len(c.objs)
	for k, n := range nm {
		c.objs = append(c.objs, newDiffObj(fmt.Sprintf("%s[name=%q]", bs, n), 2, k, 0))
	}
	quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	litID, litName := make([]string, ids), make([]string, names)
	for k := range ids {
		litID[k] = fmt.Sprintf("SELECT id, ver FROM %s WHERE id = %d", bt, k)
	}
	for k, n := range nm {
		litName[k] = fmt.Sprintf("SELECT name, ver FROM %s WHERE name = %s", bs, quote(n))
	}
	idObj := func(k int) []int { return []int{iBase + k} }
	nameObj := func(k int) []int { return []int{sBase + k} }
	idKey := func(k int) any { return int64(k) }
	nameKey := func(k int) any { return nm[k] }
	none := func(int) []any { return nil }
	c.shapes = []*diffShape{
		{name: "by id", sql: fmt.Sprintf("SELECT id, ver FROM %s WHERE id = $1", bt), cols: 1, keys: ids,
			args: func(k int) []any { return []any{k} }, objs: idObj, key: idKey},
		{name: "by an inlined id", sql: fmt.Sprintf("SELECT id, ver FROM %s WHERE id = <id>", bt), cols: 1, keys: ids,
			text: func(k int) string { return litID[k] }, args: none, objs: idObj, key: idKey},
		{name: "by name", sql: fmt.Sprintf("SELECT name, ver FROM %s WHERE name = $1", bs), cols: 1, keys: names,
			args: func(k int) []any { return []any{nm[k]} }, objs: nameObj, key: nameKey},
		{name: "by an inlined name", sql: fmt.Sprintf("SELECT name, ver FROM %s WHERE name = '<name>'", bs), cols: 1, keys: names,
			text: func(k int) string { return litName[k] }, args: none, objs: nameObj, key: nameKey},
		// Read under ttl=1m alone (no coalescing read of the same statement
		// refreshes its entries): only invalidations, the change feed's for
		// the keys written from outside, keep them fresh.
		{name: "by id, as an ORM writes it, ttl=1m", sql: fmt.Sprintf(`SELECT "t"."id", "t"."ver" FROM %s AS "t" WHERE ("t"."id" = $1)`, bt), cols: 1, keys: ids,
			args: func(k int) []any { return []any{k} }, objs: idObj, key: idKey, policies: []uint8{polTTL1m}},
		{name: "by name, as an ORM writes it, ttl=1m", sql: fmt.Sprintf(`SELECT "t"."name", "t"."ver" FROM %s AS "t" WHERE ("t"."name" = $1)`, bs), cols: 1, keys: names,
			args: func(k int) []any { return []any{nm[k]} }, objs: nameObj, key: nameKey, policies: []uint8{polTTL1m}},
	}
	// The shapes of each table: ids, names.
	tableOf := []int{0, 0, 1, 1, 0, 1}
	shapesOf := [2][]int{{0, 1, 4}, {2, 3, 5}}

	type table struct {
		keys     int
		base     int
		col      string
		arg      func(k int) any
		upd, bad string
		updLit   []string // by key, inlined as bun does
	}
	tables := [2]table{
		{keys: ids, base: iBase, col: "id", arg: func(k int) any { return k }},
		{keys: names, base: sBase, col: "name", arg: func(k int) any { return nm[k] }},
	}
	for i, name := range []string{bt, bs} {
		tb := &tables[i]
		tb.upd = fmt.Sprintf("UPDATE %s SET ver = ver + 1 WHERE %s = $1 RETURNING ver", name, tb.col)
		tb.bad = fmt.Sprintf("UPDATE %s SET ver = -%d - ver WHERE %s = $1 RETURNING ver", name, diffPoison, tb.col)
		tb.updLit = make([]string, tb.keys)
		for k := range tb.keys {
			key := fmt.Sprint(k)
			if i == 1 {
				key = quote(nm[k])
			}
			tb.updLit[k] = fmt.Sprintf("UPDATE %s SET ver = ver + 1 WHERE %s = %s RETURNING ver", name, tb.col, key)
		}
	}

	var hot [2]atomic.Int32 // per table, the key written last
	c.pick = func(rng *rand.Rand, si int) int {
		n, h := c.shapes[si].keys, int(hot[tableOf[si]].Load())
		switch rng.IntN(4) {
		case 0:
			return h
		case 1:
			return (h + rng.IntN(7) - 3 + n) % n
		default:
			return rng.IntN(n)
		}
	}

	c.write = func(w *diffWriter) {
		ti := 0
		if w.rng.IntN(5) < 2 {
			ti = 1
		}
		tb := &tables[ti]
		// The written keys are multiples of 3, k = 3j: this writer's are
		// those whose j is its own modulo the writers. Those with j%3 == 2
		// are written only by the outside client (only the change feed
		// keeps their entries fresh), the others both ways. A transaction's
		// second key p is of the same writer and kind.
		span := tb.keys / 3 / (3 * w.n) * (3 * w.n)
		j := w.own(span)
		k, p := 3*j, 3*((j+3*w.n)%span)
		o, po := c.objs[tb.base+k], c.objs[tb.base+p]
		hot[ti].Store(int32(k))
		shape := func() int { return shapesOf[ti][w.rng.IntN(len(shapesOf[ti]))] }
		si := shape()
		c.kick(si, k)
		c.kick(shape(), k)
		defer func() {
			// Reads whose calls all begin after the write returned: of the
			// key by every shape, and of its neighbours.
			for _, sj := range shapesOf[ti] {
				c.kick(sj, k)
			}
			for _, d := range []int{-1, 1, 2, -2} {
				c.kick(shape(), (k+d+tb.keys)%tb.keys)
			}
		}()
		pair := func(via string) func(tx *sql.Tx) error {
			return func(tx *sql.Tx) error {
				for i, u := range []struct {
					o *diffObj
					k int
				}{{o, k}, {po, p}} {
					got, err := scalarInt(w.ctx, tx, tb.upd, tb.arg(u.k))
					if err == nil {
						err = w.next(u.o, got, via)
					}
					if err == nil && i == 0 && !w.out {
						err = w.txRead(tx, si, k, 0, got, "updated the row")
					}
					if err != nil {
						return err
					}
				}
				// Reads of the key in flight as the COMMIT returns.
				c.kick(si, k)
				c.kick(shape(), k)
				return nil
			}
		}
		poison := func(tx *sql.Tx) error {
			bad, err := scalarInt(w.ctx, tx, tb.bad, tb.arg(k))
			if err != nil || w.out {
				return err
			}
			return w.txRead(tx, si, k, 0, bad, "poisoned the row")
		}
		x := w.rng.IntN(20)
		if j%3 == 2 {
			x = 12 + w.rng.IntN(8)
		}
		if x >= 12 {
			// Behind the Shield's back: only the change feed tells it.
			w.out, w.wdb = true, c.odb
			defer func() { w.out, w.wdb = false, c.wdb }()
		}
		switch {
		case x < 5:
			w.update("UPDATE by "+tb.col, o, tb.upd, tb.arg(k))
		case x < 7:
			w.update("UPDATE by an inlined "+tb.col, o, tb.updLit[k])
		case x < 10:
			w.tx("transaction of two rows (committed)", true, pair("transaction of two rows (committed)"), o, po)
		case x < 12:
			w.tx("transaction (rolled back)", false, poison, o)
		case x < 17:
			w.update("outside UPDATE by "+tb.col+" (pgx)", o, tb.upd, tb.arg(k))
		case x < 18:
			w.update("outside UPDATE by an inlined "+tb.col+" (pgx)", o, tb.updLit[k])
		case x < 19:
			w.tx("outside transaction of two rows (pgx, committed)", true, pair("outside transaction of two rows (pgx, committed)"), o, po)
		default:
			w.tx("outside transaction (pgx, rolled back)", false, poison, o)
		}
	}

	c.report = func(t *testing.T) {
		var outside, versions int
		for _, o := range c.objs {
			for v := 1; v <= int(o.cur()); v++ {
				versions++
				if o.out[v] {
					outside++
				}
			}
		}
		chased := 0
		for _, rs := range c.reads[c.readers:] {
			chased += len(rs)
		}
		t.Logf("reads kicked by the writers (chasers): %d; versions made outside the Shield: %d of %d, read at worst %v after they returned (the feed's allowance: %v + %v slack)",
			chased, outside, versions, time.Duration(c.worstFeedLag).Round(time.Millisecond), diffFeedAllow, diffSlack)
		t.Logf("change feed: %s", feedStats(c.sh))
		if st := c.sh.Stats(); st.FeedState != "current" || st.FeedResyncs != 0 {
			t.Logf("NOTE: the change feed is %s after %d resync(s): outside writes may have been missed for a while", st.FeedState, st.FeedResyncs)
		}
	}
	return c
}

// diffHostileNames are text keys that break a key list written carelessly
// into one statement: an array literal's quotes, backslashes, commas,
// braces and unquoted spaces, its NULL, SQL's own quotes, and unicode.
var diffHostileNames = []string{
	``, ` `, `  `, `a b`, ` lead`, `trail `, "tab\there", "new\nline",
	`'`, `''`, `O'Brien`, `'; DROP TABLE x; --`,
	`"`, `""`, `"quoted"`, `a"b`,
	`\`, `\\`, `back\slash`, `trail\`, `\"`, `\'`, `\N`,
	`,`, `a,b`, `,lead`, `trail,`,
	`{`, `}`, `{}`, `{a,b}`, `{"a","b"}`, `{{}}`, `}{`,
	`NULL`, `null`, `Null`, `(NULL)`, `{NULL}`, `"NULL"`, `NULL,NULL`,
	`$1`, `$$`, `$a$`, `?`, `%`, `%s`, `E'x'`, `U&'\0041'`, `ROW(1)`, `1::int`, `ARRAY[1]`,
	`é`, "e\u0301", `Ünïcødé`, `日本語`, `emoji 🚀`, "\u200b", "\u00a0", `ß`, `SS`,
	`a"b\c'd,e{f}g h`,
}

// batchNames returns n distinct text keys: the hostile ones, then more
// built of the same characters.
func batchNames(n int) []string {
	forms := []string{`O'Brien %d`, `%d\`, `{%d}`, `"%d"`, `a,b %d`, ` %d `, `NULL %d`, `ü%d日`, `\"%d'`, `{"%d",NULL}`}
	out := make([]string, 0, n)
	seen := map[string]bool{}
	for i := 0; len(out) < n; i++ {
		s := ""
		if i < len(diffHostileNames) {
			s = diffHostileNames[i]
		} else {
			s = fmt.Sprintf(forms[i%len(forms)], i)
		}
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
