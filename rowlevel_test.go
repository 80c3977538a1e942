package sqlflight

import "github.com/sqlflight/sqlflight/internal/epoch"

// tagged is a read of table depending on the rows whose column cols[i]
// equals one of vals[i].
func tagged(table string, cols []string, vals ...[]string) *rowDeps {
	d := &rowDeps{Table: table, Cols: cols}
	for i, c := range cols {
		for _, v := range vals[i] {
			d.Keys = append(d.Keys, epoch.TagKey(table, c, v))
		}
	}
	return d
}

func pinned(table string, kv ...any) rowWrite {
	rw := rowWrite{Table: table, Pins: map[string][]string{}}
	for i := 0; i < len(kv); i += 2 {
		rw.Pins[kv[i].(string)] = kv[i+1].([]string)
	}
	return rw
}
