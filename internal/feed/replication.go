package feed

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgproto3"
)

// The logical replication source of the change feed: a connection in
// replication=database mode, a TEMPORARY slot of the pgoutput plugin (it
// vanishes with the connection, so nothing retains WAL when the process
// dies), the publication Source.Publication (Options.FeedPublication,
// which must exist: the feed never makes one), protocol version 1. Each
// committed transaction's changes are applied at its Commit message, in
// commit order.
//
// The walsender sends a transaction's Commit as soon as its commit record
// is flushed, before the committing backend makes the transaction visible
// to other snapshots. A read that starts between the two would query the
// old row and, its flight having started after the invalidation, cache it
// until the next write of the row or its TTL. So each committed
// transaction is applied twice: at its Commit message (Sink.Apply), and
// again once an ordinary connection's snapshot shows it visible (a
// visibility check, which batches every transaction pending at the time:
// Sink.Reapply). Reads that start
// after the second application see the transaction.

const (
	// feedStatusInterval is how often the feed tells the server how far it
	// applied (and asks for a keepalive, which tells how far the server is).
	feedStatusInterval = time.Second
	// feedSilence is how long the feed waits for any message (it asks for
	// one every feedStatusInterval) before it takes the connection for dead.
	feedSilence = 10 * time.Second
)

// Replicate runs one stream of the replication source until it fails or
// ctx ends: a replication connection with src.Conn (checked with
// src.SameServer), wal_level and src.Publication checked, a temporary slot
// created and started, and a visibility connection of its own; it calls
// sink.Ready once all of them are up, then reports each committed
// transaction to sink.Apply with its commit time (and sink.Reapply once
// visible), and sink.CaughtUp at each keepalive between transactions. It
// returns what ended it: an error wrapping ErrUnavailable when what the
// stream needs is missing (the role's REPLICATION attribute, wal_level =
// logical, the publication, a free slot or WAL sender), ctx's error once
// ctx ended. A server silent for feedSilence ends it too.
func Replicate(ctx context.Context, src Source, sink Sink) error {
	cfg := src.Conn.Copy().Config // pgconn's configuration
	rp := make(map[string]string, len(cfg.RuntimeParams)+1)
	for k, v := range cfg.RuntimeParams {
		rp[k] = v
	}
	rp["replication"] = "database"
	cfg.RuntimeParams = rp
	// A context's end sets a deadline on the socket: no cancel request,
	// which would end the stream.
	cfg.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: pc.Conn()}
	}
	conn, err := pgconn.ConnectConfig(ctx, &cfg)
	if err != nil {
		return src.connectError(err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()

	if err := src.sameServer(ctx, conn); err != nil {
		return err
	}
	pub := src.Publication
	if err := src.checkReplication(ctx, conn, pub); err != nil {
		return err
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	slot := "sqlflight_" + hex.EncodeToString(id[:])
	res, err := pglogrepl.CreateReplicationSlot(ctx, conn, slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Temporary: true, SnapshotAction: "NOEXPORT_SNAPSHOT"})
	if err != nil {
		return src.slotError(err)
	}
	start, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return wrapf("sqlflight: the server's consistent point does not parse: %w", err)
	}
	err = pglogrepl.StartReplication(ctx, conn, slot, start, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", `publication_names '"` + pub + `"'`},
	})
	if err != nil {
		return src.slotError(err)
	}
	vconn, err := src.dial(ctx)
	if err != nil {
		return Unavailable(err, "cannot open the feed's visibility connection (%s)", src.classify(err))
	}
	defer closeSoon(vconn)
	sink.Ready()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	v := newVisibility(sink.Reapply, func(ctx context.Context) (string, error) {
		var snap string
		err := vconn.QueryRow(ctx, "SELECT pg_catalog.pg_current_snapshot()::text").Scan(&snap)
		return snap, err
	})
	verr := make(chan error, 1)
	go func() {
		err := v.run(sctx)
		cancel() // a failed check ends the stream, which is opened again
		verr <- err
	}()
	d := decoder{relations: map[uint32]*pglogrepl.RelationMessage{}}
	err = stream(sctx, conn, start, &d, v, sink)
	cancel()
	if e := <-verr; ctx.Err() == nil && e != nil && !errors.Is(e, context.Canceled) {
		return e
	}
	return err
}

// visibility applies committed transactions again once they are visible
// to new snapshots (see the comment at the top of this file).
type visibility struct {
	apply    func([]Change)
	snapshot func(context.Context) (string, error) // pg_current_snapshot() as text
	wake     chan struct{}

	mu      sync.Mutex
	pending []visPending
}

type visPending struct {
	xid uint32
	cs  []Change
}

func newVisibility(apply func([]Change), snapshot func(context.Context) (string, error)) *visibility {
	return &visibility{apply: apply, snapshot: snapshot, wake: make(chan struct{}, 1)}
}

// add queues the changes of transaction xid, already applied once.
func (v *visibility) add(xid uint32, cs []Change) {
	if len(cs) == 0 {
		return
	}
	v.mu.Lock()
	v.pending = append(v.pending, visPending{xid: xid, cs: cs})
	v.mu.Unlock()
	select {
	case v.wake <- struct{}{}:
	default:
	}
}

// run checks the pending transactions until ctx ends or a check fails.
func (v *visibility) run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-v.wake:
		}
		for {
			more, err := v.check(ctx)
			if err != nil {
				return err
			}
			if !more {
				break
			}
		}
	}
}

// check takes one snapshot and applies again every pending transaction
// visible in it; more reports whether some are still pending.
func (v *visibility) check(ctx context.Context) (more bool, err error) {
	v.mu.Lock()
	n := len(v.pending)
	v.mu.Unlock()
	if n == 0 {
		return false, nil
	}
	snap, err := v.snapshot(ctx)
	if err != nil {
		return false, wrapf("sqlflight: the feed's visibility check failed: %w", err)
	}
	vis, err := parseSnapshot(snap)
	if err != nil {
		return false, err
	}
	var cs []Change
	v.mu.Lock()
	kept := v.pending[:0]
	for _, p := range v.pending {
		if vis.visible(p.xid) {
			cs = append(cs, p.cs...)
		} else {
			kept = append(kept, p)
		}
	}
	clear(v.pending[len(kept):])
	v.pending = kept
	more = len(kept) > 0
	v.mu.Unlock()
	if len(cs) > 0 {
		v.apply(cs)
	}
	return more, nil
}

// pgSnapshot is a pg_snapshot's xmax and in-progress xids, in 32 bits
// (the xids of pgoutput).
type pgSnapshot struct {
	xmax uint32
	xip  map[uint32]bool
}

// parseSnapshot parses pg_snapshot's text form, xmin:xmax:xip,…
func parseSnapshot(s string) (pgSnapshot, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return pgSnapshot{}, fmt.Errorf("sqlflight: the server's snapshot %q does not parse", s)
	}
	_, err := strconv.ParseUint(parts[0], 10, 64)
	xmax, err2 := strconv.ParseUint(parts[1], 10, 64)
	if err != nil || err2 != nil {
		return pgSnapshot{}, fmt.Errorf("sqlflight: the server's snapshot %q does not parse", s)
	}
	out := pgSnapshot{xmax: uint32(xmax), xip: map[uint32]bool{}}
	if parts[2] != "" {
		for _, x := range strings.Split(parts[2], ",") {
			n, err := strconv.ParseUint(x, 10, 64)
			if err != nil {
				return pgSnapshot{}, fmt.Errorf("sqlflight: the server's snapshot %q does not parse", s)
			}
			out.xip[uint32(n)] = true
		}
	}
	return out, nil
}

// visible reports whether committed transaction xid is visible in the
// snapshot: it precedes xmax (modulo 2^32, as PostgreSQL compares xids)
// and was not in progress.
func (p pgSnapshot) visible(xid uint32) bool {
	return int32(xid-p.xmax) < 0 && !p.xip[xid]
}

// stream reads the replication stream, reporting to sink.
func stream(ctx context.Context, conn *pgconn.PgConn, applied pglogrepl.LSN, d *decoder, v *visibility, sink Sink) error {
	nextStatus := time.Now()
	heard := time.Now()
	for {
		now := time.Now()
		if !now.Before(nextStatus) {
			err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{
				WALWritePosition: applied, WALFlushPosition: applied, WALApplyPosition: applied,
				ClientTime: now, ReplyRequested: true,
			})
			if err != nil {
				return err
			}
			nextStatus = now.Add(feedStatusInterval)
		}
		if now.Sub(heard) > feedSilence {
			return errFeedSilent
		}
		rctx, cancel := context.WithDeadline(ctx, nextStatus)
		msg, err := conn.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if pgconn.Timeout(err) {
				continue
			}
			return err
		}
		heard = time.Now()
		var data []byte
		switch m := msg.(type) {
		case *pgproto3.CopyData:
			data = m.Data
		case *pgproto3.ErrorResponse:
			return pgconn.ErrorResponseToPgError(m)
		default:
			continue
		}
		if len(data) == 0 {
			continue
		}
		switch data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
			if err != nil {
				return err
			}
			if !d.inTx {
				// Everything the server sent is applied: the feed is
				// caught up to where the server is.
				applied = max(applied, ka.ServerWALEnd)
				sink.CaughtUp()
			}
			if ka.ReplyRequested {
				nextStatus = time.Time{}
			}
		case pglogrepl.XLogDataByteID:
			xld, err := pglogrepl.ParseXLogData(data[1:])
			if err != nil {
				return err
			}
			m, err := pglogrepl.Parse(xld.WALData)
			if err != nil {
				return wrapf("sqlflight: a replication message does not parse: %w", err)
			}
			if cs, commit, done := d.decode(m); done {
				sink.Apply(cs, commit.CommitTime)
				v.add(d.xid, cs)
				applied = max(applied, commit.TransactionEndLSN)
			}
		}
	}
}

// errFeedSilent ends a stream from which nothing was heard for too long.
var errFeedSilent = errors.New("sqlflight: the replication connection went silent")

// decoder turns pgoutput messages into the changes of each committed
// transaction.
type decoder struct {
	relations map[uint32]*pglogrepl.RelationMessage
	inTx      bool
	xid       uint32 // the transaction's, from its Begin
	changes   []Change
}

// decode takes one message; at a Commit it returns the transaction's
// changes and done.
func (d *decoder) decode(m pglogrepl.Message) (cs []Change, commit *pglogrepl.CommitMessage, done bool) {
	switch m := m.(type) {
	case *pglogrepl.RelationMessage:
		d.relations[m.RelationID] = m
	case *pglogrepl.BeginMessage:
		d.inTx, d.changes, d.xid = true, nil, m.Xid
	case *pglogrepl.InsertMessage:
		rel := d.relations[m.RelationID]
		d.add(rel, Change{New: rowValues(rel, m.Tuple, false)})
	case *pglogrepl.UpdateMessage:
		rel := d.relations[m.RelationID]
		c := Change{New: rowValues(rel, m.NewTuple, false)}
		switch m.OldTupleType {
		case pglogrepl.UpdateMessageTupleTypeKey:
			c.Old = rowValues(rel, m.OldTuple, true)
		case pglogrepl.UpdateMessageTupleTypeOld:
			c.Old = rowValues(rel, m.OldTuple, false)
		default:
			// No old tuple: the replica identity did not change, so its
			// columns had the values they have now; the others are unknown.
			c.Old = rowValues(rel, m.NewTuple, true)
		}
		d.add(rel, c)
	case *pglogrepl.DeleteMessage:
		rel := d.relations[m.RelationID]
		c := Change{Old: map[string]*string{}}
		switch m.OldTupleType {
		case pglogrepl.DeleteMessageTupleTypeKey:
			c.Old = rowValues(rel, m.OldTuple, true)
		case pglogrepl.DeleteMessageTupleTypeOld:
			c.Old = rowValues(rel, m.OldTuple, false)
		}
		d.add(rel, c)
	case *pglogrepl.TruncateMessage:
		for _, id := range m.RelationIDs {
			d.add(d.relations[id], Change{Whole: true})
		}
	case *pglogrepl.CommitMessage:
		cs = d.changes
		d.inTx, d.changes = false, nil
		return cs, m, true
	}
	return nil, nil, false
}

// add records a change of rel; a change of a relation the stream never
// described touches an unknown table (the whole database).
func (d *decoder) add(rel *pglogrepl.RelationMessage, c Change) {
	if rel == nil {
		c = Change{Whole: true}
	} else {
		c.Table = rel.Namespace + "." + rel.RelationName
	}
	d.changes = append(d.changes, c)
}

// rowValues returns the text values of a tuple of rel by column name: nil
// for NULL, and no entry for what is unknown (an unchanged TOASTed value,
// a value in binary form, or with keyOnly, every column outside the
// replica identity — a key tuple sends those as NULLs).
func rowValues(rel *pglogrepl.RelationMessage, t *pglogrepl.TupleData, keyOnly bool) map[string]*string {
	out := map[string]*string{}
	if rel == nil || t == nil {
		return out
	}
	for i, col := range t.Columns {
		if i >= len(rel.Columns) {
			break
		}
		rc := rel.Columns[i]
		if keyOnly && rc.Flags&1 == 0 {
			continue
		}
		switch col.DataType {
		case pglogrepl.TupleDataTypeNull:
			out[rc.Name] = nil
		case pglogrepl.TupleDataTypeText:
			v := string(col.Data)
			out[rc.Name] = &v
		}
	}
	return out
}

// checkReplication checks what the feed needs of the server beyond the
// connection: wal_level = logical and the publication.
func (src Source) checkReplication(ctx context.Context, conn *pgconn.PgConn, pub string) error {
	rows, err := conn.Exec(ctx, `SELECT pg_catalog.current_setting('wal_level'), `+
		`EXISTS (SELECT 1 FROM pg_catalog.pg_publication WHERE pubname = '`+pub+`')`).ReadAll()
	if err != nil {
		return Unavailable(err, "cannot read the server's settings on the replication connection (%s)", src.classify(err))
	}
	if len(rows) != 1 || len(rows[0].Rows) != 1 || len(rows[0].Rows[0]) != 2 {
		return Unavailable(nil, "unexpected answer to the settings query")
	}
	row := rows[0].Rows[0]
	if level := string(row[0]); level != "logical" {
		return Unavailable(nil, "the server's wal_level is %s, not logical "+
			"(ALTER SYSTEM SET wal_level = logical, then restart the server)", level)
	}
	if string(row[1]) == "t" {
		return nil
	}
	// Never made here: once a table is in a publication of updates and
	// deletes, PostgreSQL refuses UPDATE and DELETE on it without a replica
	// identity. Which tables to publish is the database owner's choice.
	return Unavailable(nil, "the publication %q does not exist: create it "+
		"(CREATE PUBLICATION %s FOR ALL TABLES, or FOR TABLE …; every table in it needs a replica identity "+
		"for UPDATE and DELETE) or name an existing one in Options.FeedPublication (sqlflight.feed_publication)", pub, pub)
}

// connectError explains why the replication connection was refused.
func (src Source) connectError(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "42501":
			return Unavailable(err, "the role lacks the REPLICATION attribute (ALTER ROLE … REPLICATION; "+
				"managed services have their own switch, e.g. the rds_replication role)")
		case "28000":
			return Unavailable(err, "the server refuses a replication connection for this role and database (pg_hba.conf)")
		case "53300":
			return Unavailable(err, "the server has no free WAL sender or connection slot (max_wal_senders, max_connections)")
		}
	}
	return Unavailable(err, "cannot open the feed's replication connection (%s)", src.classify(err))
}

// slotError explains why the replication slot could not be made or
// started.
func (src Source) slotError(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "53400":
			return Unavailable(err, "the server has no free replication slot (max_replication_slots)")
		case "55000":
			return Unavailable(err, "the server cannot decode its WAL logically (wal_level = logical is needed)")
		case "42501":
			return Unavailable(err, "the role may not create a replication slot (the REPLICATION attribute)")
		}
	}
	return Unavailable(err, "cannot start the replication stream (%s)", src.classify(err))
}
