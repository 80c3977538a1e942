package sqlflight

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

// Renew makes memTier a Leaser: compare-and-extend.
func (m *memTier) Renew(ctx context.Context, ns, key string, l Lease, ttl time.Duration) (bool, error) {
	if err := m.check(ctx); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.leases[ns+key]
	if !ok || e.token != l.Token || !l.Held || !m.clock.Now().Before(e.until) {
		return false, nil
	}
	e.until = m.clock.Now().Add(ttl)
	m.leases[ns+key] = e
	return true, nil
}

func strp(s string) *string { return &s }

func textCol(s string) *pglogrepl.TupleDataColumn {
	return &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeText, Data: []byte(s)}
}

var (
	nullCol      = &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeNull}
	unchangedCol = &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeToast}
)

func tuple(cols ...*pglogrepl.TupleDataColumn) *pglogrepl.TupleData {
	return &pglogrepl.TupleData{ColumnNum: uint16(len(cols)), Columns: cols}
}

// TestDecoderChanges: pgoutput messages become one []change per committed
// transaction: text values, nil for NULL, nothing for what is unknown
// (unchanged TOAST values, the non-key columns of a key tuple, every
// column but the key's of an UPDATE that sent no old tuple).
func TestDecoderChanges(t *testing.T) {
	d := decoder{relations: map[uint32]*pglogrepl.RelationMessage{}}
	rel := &pglogrepl.RelationMessage{RelationID: 7, Namespace: "public", RelationName: "items",
		Columns: []*pglogrepl.RelationMessageColumn{{Flags: 1, Name: "id"}, {Name: "tenant"}, {Name: "body"}}}
	msgs := []pglogrepl.Message{
		rel,
		&pglogrepl.BeginMessage{},
		&pglogrepl.InsertMessage{RelationID: 7, Tuple: tuple(textCol("1"), nullCol, textCol("x"))},
		&pglogrepl.UpdateMessage{RelationID: 7, NewTuple: tuple(textCol("1"), textCol("t"), unchangedCol)},
		&pglogrepl.UpdateMessage{RelationID: 7, OldTupleType: pglogrepl.UpdateMessageTupleTypeKey,
			OldTuple: tuple(textCol("1"), nullCol, nullCol), NewTuple: tuple(textCol("2"), textCol("t"), textCol("y"))},
		&pglogrepl.DeleteMessage{RelationID: 7, OldTupleType: pglogrepl.DeleteMessageTupleTypeKey,
			OldTuple: tuple(textCol("2"), nullCol, nullCol)},
		&pglogrepl.DeleteMessage{RelationID: 7, OldTupleType: pglogrepl.DeleteMessageTupleTypeOld,
			OldTuple: tuple(textCol("3"), nullCol, unchangedCol)},
		&pglogrepl.TruncateMessage{RelationIDs: []uint32{7, 99}},
		&pglogrepl.InsertMessage{RelationID: 42, Tuple: tuple(textCol("1"))},
	}
	for _, m := range msgs {
		if _, _, done := d.decode(m); done {
			t.Fatalf("%T ended a transaction", m)
		}
	}
	if !d.inTx {
		t.Fatal("not in a transaction after Begin")
	}
	cs, commit, done := d.decode(&pglogrepl.CommitMessage{TransactionEndLSN: 100})
	if !done || commit.TransactionEndLSN != 100 {
		t.Fatal("Commit did not end the transaction")
	}
	want := []change{
		{table: "public.items", new: map[string]*string{"id": strp("1"), "tenant": nil, "body": strp("x")}},
		{table: "public.items", old: map[string]*string{"id": strp("1")},
			new: map[string]*string{"id": strp("1"), "tenant": strp("t")}},
		{table: "public.items", old: map[string]*string{"id": strp("1")},
			new: map[string]*string{"id": strp("2"), "tenant": strp("t"), "body": strp("y")}},
		{table: "public.items", old: map[string]*string{"id": strp("2")}},
		{table: "public.items", old: map[string]*string{"id": strp("3"), "tenant": nil}},
		{table: "public.items", whole: true},
		{whole: true}, // relation 99 was never described: an unknown table
		{whole: true},
	}
	if !reflect.DeepEqual(cs, want) {
		t.Fatalf("changes:\n got %s\nwant %s", showChanges(cs), showChanges(want))
	}
	if d.inTx || d.changes != nil {
		t.Fatal("the decoder kept the committed transaction")
	}
}

func showChanges(cs []change) string {
	var b strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&b, "{%s whole=%v old=%s new=%s} ", c.table, c.whole, showRow(c.old), showRow(c.new))
	}
	return b.String()
}

func showRow(m map[string]*string) string {
	if m == nil {
		return "nil"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := "NULL"
		if m[k] != nil {
			v = *m[k]
		}
		parts = append(parts, k+"="+v)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// TestFeedDSNParams: sqlflight.feed, feed_publication and feed_lease_ttl
// set their Options; bad values are ErrBadDSN.
func TestFeedDSNParams(t *testing.T) {
	var o Options
	if err := applyDSN(&o, map[string]string{"feed": "replication", "feed_publication": "app_pub", "feed_lease_ttl": "2s"}); err != nil {
		t.Fatal(err)
	}
	if o.Feed != FeedReplication || o.FeedPublication != "app_pub" || o.FeedLeaseTTL != 2*time.Second {
		t.Fatalf("options %+v", o)
	}
	if err := applyDSN(&o, map[string]string{"feed": "notify"}); err != nil || o.Feed != FeedNotify {
		t.Fatalf("notify: %v %q", err, o.Feed)
	}
	for k, v := range map[string]string{"feed": "wal", "feed_publication": "a'b", "feed_lease_ttl": "soon"} {
		if err := applyDSN(&o, map[string]string{k: v}); !errors.Is(err, ErrBadDSN) {
			t.Errorf("%s=%s: %v, want ErrBadDSN", k, v, err)
		}
	}
}

// TestFeedStateStartingWithoutScope: a Shield with a feed reports it
// starting until a scope connects; one without reports no state.
func TestFeedStateStartingWithoutScope(t *testing.T) {
	s := New(Options{Feed: FeedReplication})
	defer s.Close()
	if st := s.Stats(); st.FeedState != "starting" {
		t.Fatalf("FeedState %q before any Connect, want starting", st.FeedState)
	}
	if st := New().Stats(); st.FeedState != "" {
		t.Fatalf("FeedState %q without a feed", st.FeedState)
	}
}

// TestFeedNeedsPostgres: a Shield with a feed refuses the first Connect of
// a scope that is not PostgreSQL through pgx, with ErrFeedUnavailable.
func TestFeedNeedsPostgres(t *testing.T) {
	s := New(Options{Feed: FeedReplication})
	defer s.Close()
	d := &fakeDriver{}
	db := sql.OpenDB(dsnConnector{drv: s.Wrap(d), dsn: "fake"})
	defer db.Close()
	err := db.Ping()
	if !errors.Is(err, ErrFeedUnavailable) || !strings.Contains(err.Error(), "pgx") {
		t.Fatalf("Ping: %v, want ErrFeedUnavailable naming pgx", err)
	}
}
