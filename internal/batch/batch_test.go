package batch

import (
	"context"
	"database/sql/driver"
	"slices"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/sqlscan"
	"github.com/sqlflight/sqlflight/internal/verdict"
)

// newGroup returns a Group of max keys per batch whose started batches
// go to the channel.
func newGroup(max int) (*Group, chan *Batch) {
	started := make(chan *Batch, 16)
	return &Group{Max: func() int { return max }, Start: func(b *Batch) { started <- b }}, started
}

func TestAloneThenBatch(t *testing.T) {
	g, started := newGroup(100)
	ctx := context.Background()
	turn, m := g.Join(ctx, "g", "1", nil)
	if turn == nil || m != nil {
		t.Fatal("the first read of a group with nothing in flight must run alone")
	}
	var members []*Member
	for _, k := range []string{"2", "3", "2", "4"} {
		tn, m := g.Join(ctx, "g", k, k)
		if tn != nil {
			t.Fatalf("key %s ran alone while a statement of its group was in flight", k)
		}
		members = append(members, m)
	}
	if len(started) != 0 {
		t.Fatal("a batch started before the statement in flight was done")
	}
	// Another group is not held up by this one.
	if tn, _ := g.Join(ctx, "other", "1", nil); tn == nil {
		t.Fatal("another group waited")
	}
	g.Done(turn)
	b := <-started
	if got := b.Keys(); !slices.Equal(got, []string{"2", "3", "4"}) {
		t.Fatalf("keys %q, want 2, 3, 4 (duplicates once, in order)", got)
	}
	if len(b.Members()) != 4 || members[0].Batch() != b || b.Index("2") != 0 || b.Index("4") != 2 || b.Index("9") != -1 {
		t.Fatal("members or indexes wrong")
	}
	// Started: a new read waits for the next batch.
	_, late := g.Join(ctx, "g", "5", nil)
	if late.Batch() == b {
		t.Fatal("a read joined a batch that had started")
	}
	g.Done(b.Turn())
	b2 := <-started
	if !slices.Equal(b2.Keys(), []string{"5"}) {
		t.Fatalf("next batch %q", b2.Keys())
	}
	g.Done(b2.Turn())
	if tn, _ := g.Join(ctx, "g", "6", nil); tn == nil {
		t.Fatal("with nothing in flight any more, a read must run alone")
	}
}

func TestFullBatchStartsAtOnce(t *testing.T) {
	g, started := newGroup(2)
	ctx := context.Background()
	turn, _ := g.Join(ctx, "g", "0", nil)
	g.Join(ctx, "g", "1", nil)
	g.Join(ctx, "g", "1", nil) // a duplicate does not fill it
	if len(started) != 0 {
		t.Fatal("started before it was full")
	}
	g.Join(ctx, "g", "2", nil)
	b := <-started
	if !slices.Equal(b.Keys(), []string{"1", "2"}) {
		t.Fatalf("full batch %q", b.Keys())
	}
	_, m := g.Join(ctx, "g", "3", nil)
	if m.Batch() == b {
		t.Fatal("joined a full batch")
	}
	g.Done(turn)
	if b3 := <-started; !slices.Equal(b3.Keys(), []string{"3"}) {
		t.Fatalf("next %q", b3.Keys())
	}
}

func TestLeaveBeforeAndAfterStart(t *testing.T) {
	g, started := newGroup(100)
	ctx := context.Background()
	turn, _ := g.Join(ctx, "g", "0", nil)
	_, gone := g.Join(ctx, "g", "1", nil)
	if !g.Leave(gone) {
		t.Fatal("a member could not leave a batch that had not started")
	}
	// A batch whose members all left is skipped: the group's count drops.
	g.Done(turn)
	if len(started) != 0 {
		t.Fatal("a batch with no member left started")
	}
	if tn, _ := g.Join(ctx, "g", "2", nil); tn == nil {
		t.Fatal("the group still counted a statement in flight")
	}
	_, a := g.Join(ctx, "g", "3", nil)
	_, b := g.Join(ctx, "g", "4", nil)
	g.Done(&Turn{g: a.Batch().turn.g})
	bt := <-started
	if g.Leave(a) {
		t.Fatal("left a batch that had started")
	}
	if g.Settle(a, Left) != Waiting {
		t.Fatal("settle of a waiting member")
	}
	if g.SendAlone(a) != Left {
		t.Fatal("a member that left was sent alone")
	}
	select {
	case <-a.Alone():
		t.Fatal("told a member that left to run alone")
	default:
	}
	if g.SendAlone(b) != Waiting {
		t.Fatal("send alone")
	}
	<-b.Alone()
	if g.Settle(b, Done) != Alone {
		t.Fatal("a member sent alone was settled again")
	}
	// Abandon: the context ends once every member that waited at the start
	// left.
	ctxDone := bt.Context().Done()
	bt.Abandon(context.Canceled)
	select {
	case <-ctxDone:
		t.Fatal("ended with a member left")
	default:
	}
	bt.Abandon(context.Canceled)
	<-ctxDone
}

func TestKeysArray(t *testing.T) {
	got := verdict.TextArray([]string{"a", `q"uo\te`, "", "NULL", "{x,y}", " sp "})
	want := `{"a","q\"uo\\te","","NULL","{x,y}"," sp "}`
	if got != want {
		t.Fatalf("got %s\nwant %s", got, want)
	}
	if verdict.TextArray(nil) != "{}" {
		t.Fatal("empty")
	}
}

func plan(t *testing.T, sql string, class map[string]verdict.ColClass, params ...uint32) *Plan {
	t.Helper()
	return NewPlan(sqlscan.Parse(sql), Shape{Table: "t", Class: func(c string) verdict.ColClass { return class[c] },
		Params: params, Builtin: true}, false)
}

func TestPlanKeys(t *testing.T) {
	ints := map[string]verdict.ColClass{"id": verdict.ClassInt, "s": verdict.ClassText, "u": verdict.ClassUUID}
	p := plan(t, "SELECT id, v FROM t WHERE id = $1", ints, 23)
	if p.Why != "" || p.Col != "id" || p.Param != 1 || p.SQL != "SELECT id, v, id AS \"sqlflight.key\" FROM t WHERE id = ANY($1::int4[])" {
		t.Fatalf("%+v", p)
	}
	arg := func(v any) []driver.NamedValue { return []driver.NamedValue{{Ordinal: 1, Value: v}} }
	for _, c := range []struct {
		v    any
		want string
		ok   bool
	}{
		{int64(7), "7", true}, {"7", "7", true}, {"007", "7", true}, {[]byte("8"), "8", true},
		{"7x", "", false}, {" 7", "", false}, {int64(3_000_000_000), "", false}, {int64(-2147483648), "-2147483648", true},
		{nil, "", false}, {1.5, "", false},
	} {
		got, ok := p.KeyOf(arg(c.v))
		if got != c.want || ok != c.ok {
			t.Errorf("KeyOf(%#v) = %q, %v; want %q, %v", c.v, got, ok, c.want, c.ok)
		}
	}
	if k, ok := p.RowKey(int64(7)); !ok || k != "7" {
		t.Error("row key")
	}
	if args := p.Args(arg(int64(7)), []string{"7", "9"}); len(args) != 1 || args[0].Value != `{"7","9"}` || args[0].Ordinal != 1 {
		t.Errorf("args %+v", args)
	}

	txt := plan(t, "SELECT id FROM t WHERE s = $1", ints, 25)
	for _, c := range []struct {
		v  any
		ok bool
	}{{"a'b\"c\\d", true}, {"", true}, {"NULL", true}, {"é", true}, {"nul\x00", false}, {"\xff", false}, {int64(1), false}} {
		if k, ok := txt.KeyOf(arg(c.v)); ok != c.ok || (ok && k != c.v) {
			t.Errorf("text KeyOf(%q) = %q, %v", c.v, k, ok)
		}
	}

	uuid := plan(t, "SELECT id FROM t WHERE u = $1", ints, 2950)
	if k, ok := uuid.KeyOf(arg("A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11")); !ok || k != "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11" {
		t.Errorf("uuid %q %v", k, ok)
	}
	if _, ok := uuid.KeyOf(arg([]byte("0123456789abcdef"))); ok {
		t.Error("a []byte uuid is sent as its 16 bytes: it must run alone")
	}

	// bun inlines the key: a constant, its array after the parameters.
	lit := plan(t, `SELECT "t"."id" FROM "t" WHERE ("t"."id" = 42) AND "t"."s" = $1`, ints, 25)
	if lit.Why != "" || lit.Col != "s" {
		t.Fatalf("the last condition keys: %+v", lit)
	}
	lit = plan(t, `SELECT "t"."id" FROM "t" WHERE "t"."s" = $1 AND ("t"."id" = 42)`, ints, 25)
	if lit.Why != "" || lit.Col != "id" || lit.Param != 0 || lit.Lit != "42" || lit.Array != 2 ||
		lit.SQL != `SELECT "t"."id", "t"."id" AS "sqlflight.key" FROM "t" WHERE "t"."s" = $1 AND ("t"."id" = ANY($2::int8[]))` {
		t.Fatalf("%+v", lit)
	}
	if k, ok := lit.KeyOf(arg("x")); !ok || k != "42" {
		t.Fatal("a constant key")
	}
	if args := lit.Args(arg("x"), []string{"42", "43"}); len(args) != 2 || args[0].Value != "x" || args[1].Ordinal != 2 {
		t.Fatalf("args %+v", args)
	}
	if g1, g2 := lit.Group, plan(t, `SELECT "t"."id" FROM "t" WHERE "t"."s" = $1 AND ("t"."id" = 43)`, ints, 25).Group; g1 != g2 {
		t.Fatalf("two texts of one group: %q, %q", g1, g2)
	}

	for _, c := range []struct {
		sql    string
		params []uint32
	}{
		{"SELECT id FROM t WHERE n = $1", []uint32{1700}}, // numeric: not a batchable class
		{"SELECT id FROM t WHERE id = $1", []uint32{25}},  // a text parameter for an int column
		{"SELECT id FROM t WHERE id = '5'", nil},          // a string for an int column
		{"SELECT id FROM t WHERE id = $1 LIMIT 1", []uint32{23}},
	} {
		if p := plan(t, c.sql, ints, c.params...); p.Why == "" {
			t.Errorf("%s batches: %+v", c.sql, p)
		}
	}
	if p := NewPlan(sqlscan.Parse("SELECT id FROM t WHERE id = $1"), Shape{Table: "t", Class: func(string) verdict.ColClass { return verdict.ClassInt },
		Params: []uint32{23}, Builtin: false}, false); p.Why == "" {
		t.Error("a function of the user's may aggregate")
	}
	if p := NewPlan(sqlscan.Parse("SELECT id FROM u WHERE id = $1"), Shape{Table: "t", Class: func(string) verdict.ColClass { return verdict.ClassInt },
		Params: []uint32{23}, Builtin: true}, false); p.Why == "" {
		t.Error("another table")
	}
}

func TestMaxWait(t *testing.T) {
	g, started := newGroup(100)
	g.MaxWait = func() time.Duration { return time.Millisecond }
	ctx := context.Background()
	turn, _ := g.Join(ctx, "g", "0", nil)
	_, m := g.Join(ctx, "g", "1", nil)
	b := <-started // past MaxWait, beside the read in flight
	if m.Batch() != b || !slices.Equal(b.Keys(), []string{"1"}) {
		t.Fatal("the batch that waited MaxWait did not start")
	}
	// Both hold a turn: the group is done once both are.
	g.Done(turn)
	if g.Len() != 1 {
		t.Fatal("the group ended with its batch in flight")
	}
	g.Done(b.Turn())
	if g.Len() != 0 {
		t.Fatal("the group outlived its statements")
	}
	// A batch that started before its time (its turn came) is not started
	// again by its timer.
	turn, _ = g.Join(ctx, "g", "0", nil)
	g.MaxWait = func() time.Duration { return 20 * time.Millisecond }
	g.Join(ctx, "g", "2", nil)
	g.Done(turn)
	b = <-started
	time.Sleep(40 * time.Millisecond)
	select {
	case again := <-started:
		t.Fatalf("started twice: %v", again.Keys())
	default:
	}
	g.Done(b.Turn())
}
