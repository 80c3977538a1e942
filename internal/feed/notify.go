package feed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The queue reader's rhythm (see Listen). Variables, for tests (see
// SetRhythmForTest).
var (
	// queuePoll is the longest a listener waits for a wake-up before it
	// reads the queue anyway.
	queuePoll = 5 * time.Second
	// feedCheckInterval is how often a listener checks that the triggers
	// are still there.
	feedCheckInterval = 30 * time.Second
	// queueKeep is how long a read record stays in the queue for the other
	// listeners (of other processes) before a listener trims it.
	queueKeep = 10 * time.Minute
	// maxReadGap: a listener whose reads are further apart than this (its
	// connection stalled) may have missed records another trimmed, and
	// resyncs. It is well below queueKeep.
	maxReadGap = 5 * time.Minute
)

// maxQueueRead and maxQueueBytes bound the records one read takes; a
// larger backlog is a resync. Variables, for tests.
var (
	maxQueueRead  = 10000
	maxQueueBytes = 8 << 20
)

// The listener's statements, marked for pg_stat_activity.
const (
	queueSnapshotSQL = `/* sqlflight feed */ SELECT pg_catalog.pg_current_snapshot()::text`
	// queueReadSQL returns the records of the transactions the previous
	// read's snapshot ($1) did not see committed, and the snapshot it read
	// them in: nothing is read twice and nothing committed is skipped,
	// whatever order the writers committed in.
	queueReadSQL = `/* sqlflight feed */ SELECT s.snap::text, c.id, c.payload
FROM (SELECT pg_catalog.pg_current_snapshot() AS snap) s
LEFT JOIN sqlflight.changes c
  ON c.xid >= pg_catalog.pg_snapshot_xmin($1::text::pg_catalog.pg_snapshot)
 AND NOT pg_catalog.pg_visible_in_snapshot(c.xid, $1::text::pg_catalog.pg_snapshot)
ORDER BY c.id
LIMIT 10001
`
	// queueTrimSQL removes the records every snapshot at least as recent as
	// $1 sees: committed before it.
	queueTrimSQL = `/* sqlflight feed */ DELETE FROM sqlflight.changes WHERE xid < pg_catalog.pg_snapshot_xmin($1::text::pg_catalog.pg_snapshot)`
	// feedCheckSQL tells the triggers' function's comment, whether the
	// queue exists, and how many enabled triggers run the function.
	feedCheckSQL = `/* sqlflight feed */ SELECT pg_catalog.obj_description(p.oid, 'pg_proc'),
       pg_catalog.to_regclass('sqlflight.changes') IS NOT NULL,
       (SELECT pg_catalog.count(*) FROM pg_catalog.pg_trigger t WHERE t.tgfoid = p.oid AND t.tgenabled <> 'D')
FROM (SELECT pg_catalog.to_regprocedure('sqlflight.notify_changes()') AS oid) p`
)

// SetRhythmForTest sets how long a listener waits for a wake-up before it
// reads the queue anyway (poll) and how often it checks the triggers
// (check), for tests that cannot wait for the defaults, and returns a
// function that restores them. It is for tests only, and must be called
// while no listener runs.
func SetRhythmForTest(poll, check time.Duration) (restore func()) {
	oldPoll, oldCheck := queuePoll, feedCheckInterval
	queuePoll, feedCheckInterval = poll, check
	return func() { queuePoll, feedCheckInterval = oldPoll, oldCheck }
}

// Notify runs one stream of the NOTIFY source until it fails or ctx ends:
// it opens a connection of its own with src.Conn, checks it with
// src.SameServer, and follows the triggers' queue on it (see Listen),
// reporting to sink. It returns what ended it: an error wrapping
// ErrUnavailable when the connection cannot be opened or the triggers are
// missing, ctx's error once ctx ended.
func Notify(ctx context.Context, src Source, sink Sink) error {
	conn, err := src.dial(ctx)
	if err != nil {
		return Unavailable(err, "cannot open the feed's connection (%s)", src.classify(err))
	}
	defer closeSoon(conn)
	if err := src.sameServer(ctx, conn.PgConn()); err != nil {
		return err
	}
	return Listen(ctx, conn, sink)
}

// Listen follows the queue of change records the triggers that
// `sqlflight triggers install` create write, on conn: it LISTENs on
// NotifyChannel for the wake-ups the triggers send at commit, reads the
// records committed since its last read (at each wake-up, and every
// queuePoll anyway), and calls sink.Apply with each record's changes
// (sink.Resync for a backlog too large, or reads too far apart), until ctx
// ends or the connection fails. It calls sink.Ready once it is listening
// and has read the queue's state. It returns what ended it.
//
// A notification carries nothing: whoever sends one (LISTEN and NOTIFY
// have no access control) costs the listener one read of the queue, which
// only the installing role (and the triggers' function, SECURITY DEFINER)
// can read or write. Notifications that arrived during a read are taken
// together by the next.
//
// Every feedCheckInterval it checks that the triggers are still there: a
// function gone, or fewer enabled triggers than at the last check, ends it
// with an error wrapping ErrUnavailable (so do triggers of an earlier
// install, or none at all, at the start). It trims the records of
// transactions committed at least queueKeep ago. conn must be outside a
// transaction, deliver its notifications to WaitForNotification (no
// OnNotification), and be used by nothing else meanwhile; the caller
// closes it.
func Listen(ctx context.Context, conn *pgx.Conn, sink Sink) error {
	fail := func(err error, what string) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return wrapf("sqlflight: "+what+": %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		return fail(err, "LISTEN "+NotifyChannel)
	}
	triggers, err := checkTriggers(ctx, conn, -1)
	if err != nil {
		return err
	}
	q := queueReader{conn: conn}
	sent := time.Now()
	if err := conn.QueryRow(ctx, queueSnapshotSQL).Scan(&q.snap); err != nil {
		return fail(err, "reading the change queue's snapshot")
	}
	q.sent, q.marks = sent, []snapMark{{at: time.Now(), snap: q.snap}}
	sink.Ready()
	checked := time.Now()
	for {
		wctx, cancel := context.WithTimeout(ctx, queuePoll)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil && !errors.Is(err, context.DeadlineExceeded):
			return fail(err, "waiting for change notifications")
		case n == nil && err == nil:
			// pgx hands notifications to the connection's OnNotification
			// when one is set: none reaches here then.
			return errors.New("sqlflight: the change feed's connection delivers its notifications elsewhere")
		}
		// Whatever is buffered already is covered by this read.
		drainNotifications(conn)
		if err := q.read(ctx, sink); err != nil {
			return fail(err, "reading the change queue")
		}
		if time.Since(checked) >= feedCheckInterval {
			if triggers, err = checkTriggers(ctx, conn, triggers); err != nil {
				return err
			}
			checked = time.Now()
		}
		q.trim(ctx, sink)
	}
}

// drainNotifications drops the notifications conn has buffered, without
// waiting for more.
func drainNotifications(conn *pgx.Conn) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for {
		if n, err := conn.WaitForNotification(done); err != nil || n == nil {
			return
		}
	}
}

// checkTriggers checks that the triggers' function is this version's,
// that the queue exists, and that at least one enabled trigger runs the
// function, and no fewer than before (before < 0: the first check). It
// returns how many do.
func checkTriggers(ctx context.Context, conn *pgx.Conn, before int64) (int64, error) {
	var comment *string
	var queue bool
	var n int64
	if err := conn.QueryRow(ctx, feedCheckSQL).Scan(&comment, &queue, &n); err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42501" {
			return 0, Unavailable(err, "the feed's role may not use the sqlflight schema: connect the feed as the role that installed the triggers (Options.FeedDSN)")
		}
		return 0, wrapf("sqlflight: checking the change triggers: %w", err)
	}
	switch {
	case comment == nil:
		return 0, Unavailable(nil, "the change triggers are not installed (sqlflight triggers install)")
	case *comment != feedVersion || !queue:
		return 0, Unavailable(nil, "the change triggers were installed by an earlier sqlflight: install them again (sqlflight triggers install)")
	case n == 0:
		return 0, Unavailable(nil, "no table has the change triggers (sqlflight triggers install)")
	case before >= 0 && n < before:
		return 0, Unavailable(nil, "%d of the %d change triggers were dropped or disabled: writes to their tables are not seen", before-n, before)
	}
	return n, nil
}

// queueReader is a listener's place in the queue.
type queueReader struct {
	conn *pgx.Conn
	// snap is the snapshot of the last read (pg_snapshot's text form):
	// the next read takes what it did not see committed. sent is when
	// that read was sent (its snapshot is no older).
	snap string
	sent time.Time
	// marks are snapshots of earlier reads, oldest first, at most one a
	// minute: when one is queueKeep old, the records it saw are trimmed.
	marks []snapMark
	// trimWarned: a trim failed once (logged once).
	trimWarned bool
}

// snapMark is a read's snapshot and when the read returned (the snapshot
// is no younger).
type snapMark struct {
	at   time.Time
	snap string
}

// read reads the records committed since the last read and applies them.
func (q *queueReader) read(ctx context.Context, sink Sink) error {
	sent := time.Now()
	rows, err := q.conn.Query(ctx, queueReadSQL, q.snap)
	if err != nil {
		return err
	}
	var snap string
	var payloads []string
	size, overflow := 0, false
	for rows.Next() {
		var id *int64
		var payload *string
		if err := rows.Scan(&snap, &id, &payload); err != nil {
			rows.Close()
			return err
		}
		if id == nil || payload == nil {
			continue
		}
		if size += len(*payload); size > maxQueueBytes || len(payloads) == maxQueueRead {
			overflow = true
			rows.Close()
			break
		}
		payloads = append(payloads, *payload)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	now := time.Now()
	// A gap longer than maxReadGap: another listener may have trimmed
	// records this one never read.
	gap := now.Sub(q.sent) > maxReadGap
	q.snap, q.sent = snap, sent
	if last := q.marks[len(q.marks)-1]; now.Sub(last.at) >= time.Minute {
		q.marks = append(q.marks, snapMark{at: now, snap: snap})
	}
	if gap || overflow {
		sink.Resync()
		return nil
	}
	for _, p := range payloads {
		sink.Apply(parseChangeNotification(p), time.Time{})
	}
	return nil
}

// trim removes the records of transactions committed before a read's
// snapshot that is queueKeep old: every listener whose reads are at most
// maxReadGap apart has read them. A trim that fails (the feed's role may
// read the queue but not delete from it) is logged once.
func (q *queueReader) trim(ctx context.Context, sink Sink) {
	i := 0
	for i < len(q.marks)-1 && time.Since(q.marks[i+1].at) >= queueKeep {
		i++
	}
	if time.Since(q.marks[i].at) < queueKeep {
		return
	}
	mark := q.marks[i]
	q.marks = q.marks[i+1:]
	if len(q.marks) == 0 {
		q.marks = []snapMark{{at: time.Now(), snap: q.snap}}
	}
	if _, err := q.conn.Exec(ctx, queueTrimSQL, mark.snap); err != nil && ctx.Err() == nil && !q.trimWarned {
		q.trimWarned = true
		sink.Warn("sqlflight: change feed: cannot trim the change queue (writers trim it now and then)", err)
	}
}

// Bounds on what one notification may make. The server's payloads are
// shorter than 8000 bytes; anything longer is not the triggers'.
const (
	maxNotifyPayload = 8000
	// maxNotifyChanges bounds the changes one notification expands to
	// (rows × tables of its partition tree); past it the tree's other
	// tables are reported whole.
	maxNotifyChanges = 4096
)

// notifyPayload is the JSON a trigger notifies (see InstallTriggersSQL).
type notifyPayload struct {
	V       int                 `json:"v"`
	Schema  *string             `json:"s"`
	Table   *string             `json:"t"`
	Op      string              `json:"op"`
	Related [][]string          `json:"r"`
	Whole   bool                `json:"w"`
	All     bool                `json:"all"`
	Columns []string            `json:"c"`
	Old     [][]json.RawMessage `json:"o"`
	New     [][]json.RawMessage `json:"n"`
}

// everything returns the change of a notification that cannot be read:
// any table may have changed.
func everything() []Change { return []Change{{Whole: true}} }

// parseChangeNotification turns a trigger's notification payload into the
// changes it reports: one per row before (old) and after (new) the
// statement, for the table and for each other table of its partition tree;
// an UPDATE's old and new rows are reported as separate changes (a
// statement-level trigger cannot pair them), which invalidate what the
// pairs would. A TRUNCATE or a degraded payload is one whole change per
// table. A payload that is not exactly what the triggers send (too long,
// not UTF-8, not the JSON they write, another version, rows that do not
// match their columns) is a change of every table (Table ""). Its cost is
// linear in the payload's length, which is bounded; it never panics.
func parseChangeNotification(payload string) []Change {
	if len(payload) > maxNotifyPayload || !utf8.ValidString(payload) {
		return everything()
	}
	var p notifyPayload
	dec := json.NewDecoder(bytes.NewReader([]byte(payload)))
	dec.DisallowUnknownFields()
	if dec.Decode(&p) != nil || dec.More() {
		return everything()
	}
	if p.V != 1 || p.All || p.Schema == nil || p.Table == nil || *p.Schema == "" || *p.Table == "" {
		return everything()
	}
	switch p.Op {
	case "I", "U", "D", "T":
	default:
		return everything()
	}
	tables := []string{*p.Schema + "." + *p.Table}
	for _, r := range p.Related {
		if len(r) != 2 || r[0] == "" || r[1] == "" {
			return everything()
		}
		tables = append(tables, r[0]+"."+r[1])
	}
	if p.Whole || p.Op == "T" {
		if p.Columns != nil || p.Old != nil || p.New != nil {
			return everything()
		}
		return wholeChanges(tables)
	}
	if len(p.Columns) == 0 || len(p.Old)+len(p.New) == 0 ||
		p.Op == "I" && p.Old != nil || p.Op == "D" && p.New != nil {
		return everything()
	}
	seen := make(map[string]bool, len(p.Columns))
	for _, c := range p.Columns {
		if c == "" || seen[c] {
			return everything()
		}
		seen[c] = true
	}
	rows := make([]Change, 0, len(p.Old)+len(p.New))
	for i, side := range [2][][]json.RawMessage{p.Old, p.New} {
		old := i == 0
		for _, r := range side {
			m, ok := notifiedRow(p.Columns, r)
			if !ok {
				return everything()
			}
			if old {
				rows = append(rows, Change{Table: tables[0], Old: m})
			} else {
				rows = append(rows, Change{Table: tables[0], New: m})
			}
		}
	}
	if len(tables) == 1 {
		return rows
	}
	if len(rows)*len(tables) > maxNotifyChanges {
		return append(rows, wholeChanges(tables[1:])...)
	}
	// The rows' maps are shared by the tables' changes: changes are read,
	// never written.
	out := make([]Change, 0, len(rows)*len(tables))
	out = append(out, rows...)
	for _, t := range tables[1:] {
		for _, c := range rows {
			c.Table = t
			out = append(out, c)
		}
	}
	return out
}

// wholeChanges returns a whole change for each table.
func wholeChanges(tables []string) []Change {
	cs := make([]Change, len(tables))
	for i, t := range tables {
		cs[i] = Change{Table: t, Whole: true}
	}
	return cs
}

// notifiedRow maps columns to a row's values: a JSON string is the column's
// text, null is SQL NULL, false is unknown (left out of the map). Anything
// else, or a row of another length, is not the triggers'.
func notifiedRow(columns []string, row []json.RawMessage) (map[string]*string, bool) {
	if len(row) != len(columns) {
		return nil, false
	}
	m := make(map[string]*string, len(row))
	for i, raw := range row {
		switch {
		case bytes.Equal(raw, []byte("null")):
			m[columns[i]] = nil
		case bytes.Equal(raw, []byte("false")):
		case len(raw) > 0 && raw[0] == '"' && plainEscapes(raw):
			v := new(string)
			if json.Unmarshal(raw, v) != nil {
				return nil, false
			}
			m[columns[i]] = v
		default:
			return nil, false
		}
	}
	return m, true
}

// plainEscapes reports whether a JSON string uses no \u escape but those of
// control characters (\u00XX), as PostgreSQL's to_json writes them. Other
// escapes, such as a lone surrogate that decoding would turn into U+FFFD,
// would make a value the server never had.
func plainEscapes(raw json.RawMessage) bool {
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		i++
		if i < len(raw) && raw[i] == 'u' && (i+2 >= len(raw) || raw[i+1] != '0' || raw[i+2] != '0') {
			return false
		}
	}
	return true
}
