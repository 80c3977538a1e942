package redistier

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sqlflight/sqlflight"
)

// Timings of subscriptions; variables so that tests can shorten them.
var (
	// subscribeWait bounds how long Subscribe waits for Redis to confirm.
	subscribeWait = 2 * time.Second
	// healthInterval is how long a subscription may stay silent before it
	// pings Redis; if the pong does not come within another interval, the
	// connection is taken for dead and replaced.
	healthInterval = 15 * time.Second
	// Backoff between attempts while Redis cannot be reached.
	minBackoff = 50 * time.Millisecond
	maxBackoff = time.Second
)

// A subscription is one Subscribe: a goroutine receiving from a PubSub.
type subscription struct {
	client  redis.UniversalClient
	channel string
	fn      func(sqlflight.Invalidation)

	ctx    context.Context // canceled by stop
	cancel context.CancelFunc
	ready  chan struct{} // closed on the first confirmation
	failed chan struct{} // closed on the first error before it
	done   chan struct{} // closed when run returns

	mu      sync.Mutex
	ps      *redis.PubSub
	started bool
	stopped bool
	gaveUp  atomic.Bool // start returned before the first confirmation
}

func newSubscription(client redis.UniversalClient, channel string, fn func(sqlflight.Invalidation)) *subscription {
	ctx, cancel := context.WithCancel(context.Background())
	return &subscription{
		client:  client,
		channel: channel,
		fn:      fn,
		ctx:     ctx,
		cancel:  cancel,
		ready:   make(chan struct{}),
		failed:  make(chan struct{}),
		done:    make(chan struct{}),
	}
}

// start runs the subscription and waits, at most subscribeWait, for Redis to
// confirm it; it returns at once if Redis cannot be reached (the
// subscription goes on trying, and reports a Resync when it gets through).
func (s *subscription) start() {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	s.started = true
	s.mu.Unlock()

	go s.run()
	timer := time.NewTimer(subscribeWait)
	defer timer.Stop()
	select {
	case <-s.ready:
	case <-s.failed:
		s.gaveUp.Store(true)
	case <-s.done:
	case <-timer.C:
		// Writes published until Redis confirms may be missed: the first
		// confirmation then comes with a Resync.
		s.gaveUp.Store(true)
	}
}

// stop ends the subscription and waits for its goroutine to return. It is
// safe to call more than once, and from several goroutines.
func (s *subscription) stop() {
	s.cancel() // first: a dial or handshake in progress ends now
	s.mu.Lock()
	started := s.started
	if !s.stopped {
		s.stopped = true
		if s.ps != nil {
			_ = s.ps.Close() // unblocks a pending receive
		}
	}
	s.mu.Unlock()
	if started {
		<-s.done
	}
}

// subscribe replaces the subscription's PubSub by a new one; it reports
// false if the subscription is stopping.
func (s *subscription) subscribe() (*redis.PubSub, bool) {
	s.mu.Lock()
	old := s.ps
	s.ps = nil
	stopped := s.stopped
	s.mu.Unlock()
	if old != nil {
		_ = old.Close()
	}
	if stopped {
		return nil, false
	}
	// Dialled outside the lock, so that stop never waits for it. An error
	// here (Redis down) is kept by the PubSub and retried on the next
	// receive, which dials and subscribes again.
	ps := s.client.Subscribe(s.ctx, s.channel)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		_ = ps.Close()
		return nil, false
	}
	s.ps = ps
	return ps, true
}

func (s *subscription) run() {
	defer close(s.done)
	defer s.cancel()

	ps, ok := s.subscribe()
	if !ok {
		return
	}
	var (
		confirmed bool // the first confirmation came
		failed    bool // an error came before it
		resync    bool // messages may have been lost: tell fn first
		pinged    bool // a health-check ping is unanswered
		backoff   = minBackoff
	)
	for {
		msg, err := ps.ReceiveTimeout(s.ctx, healthInterval)
		if s.ctx.Err() != nil {
			return
		}
		if err != nil {
			if isTimeout(err) && !pinged {
				// Silent for a while: make sure the connection still works.
				pinged = true
				if err = ps.Ping(s.ctx); err == nil {
					continue
				}
			}
			resync = true
			pinged = false
			if !confirmed && !failed {
				failed = true
				close(s.failed)
			}
			if isTimeout(err) {
				// No pong: the connection is dead without being closed.
				if ps, ok = s.subscribe(); !ok {
					return
				}
			}
			// Otherwise the PubSub dials and subscribes again on the next
			// receive.
			select {
			case <-s.ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		backoff = minBackoff
		pinged = false

		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind != "subscribe" {
				continue
			}
			if !confirmed {
				confirmed = true
				close(s.ready)
				if s.gaveUp.Load() {
					resync = true // Subscribe returned before this
				}
			} else {
				resync = true // the connection was made again
			}
			if resync {
				resync = false
				s.fn(sqlflight.Invalidation{Resync: true})
			}
		case *redis.Message:
			if resync {
				resync = false
				s.fn(sqlflight.Invalidation{Resync: true})
			}
			inv, err := decodeInvalidation(m.Payload)
			if err != nil {
				// Nobody's write that can be told: the Shield counts it and
				// goes on (dropping L1 for it would let anybody who can
				// publish empty every instance's cache).
				s.fn(sqlflight.Invalidation{Malformed: true})
				continue
			}
			s.fn(inv)
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// The message of an invalidation is the lines
//
//	sqlflight/2 seq all|tables tag
//	"source"
//	"table"...
//
// with seq in decimal, the tag in hex, and every string in Go's quoted
// form, so that any bytes round-trip. A message with row writes is
// sqlflight/3 and goes on, after its tables, with for each row write a line
// r "table" and, for each of its columns, a line c "column" "value"...
// A message longer than maxMessageBytes, or of more than maxMessageTables
// lines after its source, is not read.
const (
	messageVersion   = "sqlflight/2"
	messageRows      = "sqlflight/3"
	maxMessageBytes  = 64 << 10
	maxMessageTables = 1024
)

func encodeInvalidation(inv sqlflight.Invalidation) string {
	var b strings.Builder
	if len(inv.Rows) > 0 {
		b.WriteString(messageRows)
	} else {
		b.WriteString(messageVersion)
	}
	b.WriteByte(' ')
	b.WriteString(strconv.FormatUint(inv.Seq, 10))
	if inv.All {
		b.WriteString(" all ")
	} else {
		b.WriteString(" tables ")
	}
	b.WriteString(hex.EncodeToString(inv.Tag))
	b.WriteByte('\n')
	b.WriteString(strconv.Quote(inv.Source))
	for _, t := range inv.Tables {
		b.WriteByte('\n')
		b.WriteString(strconv.Quote(t))
	}
	for _, rp := range inv.Rows {
		b.WriteString("\nr ")
		b.WriteString(strconv.Quote(rp.Table))
		for i, c := range rp.Columns {
			b.WriteString("\nc ")
			b.WriteString(strconv.Quote(c))
			if i < len(rp.Values) {
				for _, v := range rp.Values[i] {
					b.WriteByte(' ')
					b.WriteString(strconv.Quote(v))
				}
			}
		}
	}
	return b.String()
}

var errMalformed = errors.New("redistier: malformed invalidation")

// decodeInvalidation reads a message. Its memory is bounded by the
// message's length (at most maxMessageBytes), and its errors never quote it.
func decodeInvalidation(msg string) (sqlflight.Invalidation, error) {
	var inv sqlflight.Invalidation
	if len(msg) > maxMessageBytes {
		return inv, fmt.Errorf("%w: %d bytes", errMalformed, len(msg))
	}
	head, rest, ok := strings.Cut(msg, "\n")
	if !ok {
		return inv, fmt.Errorf("%w: no source", errMalformed)
	}
	f := strings.Split(head, " ")
	if len(f) != 4 || (f[0] != messageVersion && f[0] != messageRows) {
		return inv, fmt.Errorf("%w: unknown header", errMalformed)
	}
	withRows := f[0] == messageRows
	seq, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil || seq == 0 {
		return inv, fmt.Errorf("%w: sequence", errMalformed)
	}
	inv.Seq = seq
	switch f[2] {
	case "all":
		inv.All = true
	case "tables":
	default:
		return inv, fmt.Errorf("%w: kind", errMalformed)
	}
	if inv.Tag, err = hex.DecodeString(f[3]); err != nil || len(inv.Tag) == 0 {
		return inv, fmt.Errorf("%w: tag", errMalformed)
	}
	if strings.Count(rest, "\n") > maxMessageTables {
		return inv, fmt.Errorf("%w: more than %d tables", errMalformed, maxMessageTables)
	}
	lines := strings.Split(rest, "\n")
	if inv.Source, err = strconv.Unquote(lines[0]); err != nil {
		return inv, fmt.Errorf("%w: source", errMalformed)
	}
	lines = lines[1:]
	for len(lines) > 0 && strings.HasPrefix(lines[0], `"`) {
		t, err := strconv.Unquote(lines[0])
		if err != nil {
			return inv, fmt.Errorf("%w: table", errMalformed)
		}
		inv.Tables = append(inv.Tables, t)
		lines = lines[1:]
	}
	if len(lines) > 0 && !withRows {
		return inv, fmt.Errorf("%w: table", errMalformed)
	}
	for _, l := range lines {
		kind, quoted, _ := strings.Cut(l, " ")
		strs, ok := unquoteAll(quoted)
		switch {
		case !ok || len(strs) == 0:
			return inv, fmt.Errorf("%w: row", errMalformed)
		case kind == "r" && len(strs) == 1:
			inv.Rows = append(inv.Rows, sqlflight.RowPins{Table: strs[0]})
		case kind == "c" && len(inv.Rows) > 0:
			rp := &inv.Rows[len(inv.Rows)-1]
			rp.Columns = append(rp.Columns, strs[0])
			rp.Values = append(rp.Values, strs[1:])
		default:
			return inv, fmt.Errorf("%w: row", errMalformed)
		}
	}
	if withRows && len(inv.Rows) == 0 {
		return inv, fmt.Errorf("%w: no row", errMalformed)
	}
	return inv, nil
}

// unquoteAll reads s, Go-quoted strings separated by single spaces.
func unquoteAll(s string) ([]string, bool) {
	var out []string
	for s != "" {
		q, err := strconv.QuotedPrefix(s)
		if err != nil {
			return nil, false
		}
		v, err := strconv.Unquote(q)
		if err != nil {
			return nil, false
		}
		out = append(out, v)
		s = s[len(q):]
		if s != "" {
			if s[0] != ' ' || len(s) == 1 {
				return nil, false
			}
			s = s[1:]
		}
	}
	return out, true
}
