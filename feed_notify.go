package sqlflight

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// listenChanges LISTENs on conn for the change notifications of the triggers that
// `sqlflight triggers install` creates, and calls apply with each notification's
// changes (in the order the server delivers them, which is commit order), until
// ctx ends or the connection fails; it calls ready once it is listening. It returns
// what ended it.
//
// conn must be outside a transaction and used by nothing else meanwhile;
// when listenChanges returns it is still LISTENing (the caller closes it).
// Notifications of other channels are ignored. A notification on
// NotifyChannel that is not the triggers' (see parseChangeNotification) is
// applied as a change of every table: something changed, and what cannot
// be told.
func listenChanges(ctx context.Context, conn *pgx.Conn, apply func([]change), ready func()) error {
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return wrapf("sqlflight: LISTEN %s: %w", NotifyChannel, err)
	}
	ready()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return wrapf("sqlflight: waiting for change notifications: %w", err)
		}
		if n == nil {
			// pgx hands notifications to the connection's OnNotification
			// when one is set: none reaches here then.
			return errors.New("sqlflight: the change feed's connection delivers its notifications elsewhere")
		}
		if n.Channel != NotifyChannel {
			continue
		}
		apply(parseChangeNotification(n.Payload))
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
func everything() []change { return []change{{whole: true}} }

// parseChangeNotification turns a trigger's notification payload into the
// changes it reports: one per row before (old) and after (new) the
// statement, for the table and for each other table of its partition tree;
// an UPDATE's old and new rows are reported as separate changes (a
// statement-level trigger cannot pair them), which invalidate what the
// pairs would. A TRUNCATE or a degraded payload is one whole change per
// table. A payload that is not exactly what the triggers send (too long,
// not UTF-8, not the JSON they write, another version, rows that do not
// match their columns) is a change of every table (table ""). Its cost is
// linear in the payload's length, which is bounded; it never panics.
func parseChangeNotification(payload string) []change {
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
	rows := make([]change, 0, len(p.Old)+len(p.New))
	for i, side := range [2][][]json.RawMessage{p.Old, p.New} {
		old := i == 0
		for _, r := range side {
			m, ok := notifiedRow(p.Columns, r)
			if !ok {
				return everything()
			}
			if old {
				rows = append(rows, change{table: tables[0], old: m})
			} else {
				rows = append(rows, change{table: tables[0], new: m})
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
	out := make([]change, 0, len(rows)*len(tables))
	out = append(out, rows...)
	for _, t := range tables[1:] {
		for _, c := range rows {
			c.table = t
			out = append(out, c)
		}
	}
	return out
}

// wholeChanges returns a whole change for each table.
func wholeChanges(tables []string) []change {
	cs := make([]change, len(tables))
	for i, t := range tables {
		cs[i] = change{table: t, whole: true}
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
