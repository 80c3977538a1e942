package sqlscan

import (
	"fmt"
	"strings"
	"testing"
)

// conds renders a filter's conditions compactly: col=[$1 5 'x' true null].
func conds(f *RowFilter) string {
	var b strings.Builder
	for i, c := range f.Where {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s=%s", c.Column, operands(c.Values))
	}
	return b.String()
}

func operands(ops []Operand) string {
	var parts []string
	for _, o := range ops {
		parts = append(parts, operand(o))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func operand(o Operand) string {
	switch o.Kind {
	case OpParam:
		return fmt.Sprintf("$%d", o.Param)
	case OpNumber:
		return o.Text
	case OpString:
		return "'" + o.Text + "'"
	case OpBool:
		return o.Text
	case OpNull:
		return "null"
	}
	return "?"
}

func TestFilterSelect(t *testing.T) {
	for _, c := range []struct{ sql, table, want string }{
		{`SELECT * FROM items WHERE id = $1`, "items", "id=[$1]"},
		{`select name from items where tenant_id = $1 and id = $2`, "items", "tenant_id=[$1] id=[$2]"},
		{`SELECT * FROM items WHERE id IN ($1, $2, 7)`, "items", "id=[$1 $2 7]"},
		{`SELECT * FROM items WHERE $1 = id`, "items", "id=[$1]"},
		{`SELECT * FROM items WHERE id = 5 AND code = 'it''s'`, "items", "id=[5] code=['it's']"},
		{`SELECT * FROM items WHERE id = -5`, "items", "id=[-5]"},
		{`SELECT * FROM items WHERE (id = 5)`, "items", "id=[5]"},
		{`SELECT "items"."id" FROM "items" WHERE ("items"."id" = 5) AND (tenant_id = $1 AND (k IN (1, 2)))`, "items", "id=[5] tenant_id=[$1] k=[1 2]"},
		{`SELECT * FROM items WHERE ((id = $1)) ORDER BY id`, "items", "id=[$1]"},
		{`SELECT * FROM items WHERE flag = true`, "items", "flag=[true]"},
		{`SELECT * FROM items WHERE id = NULL`, "items", "id=[null]"},
		{`SELECT * FROM items i WHERE i.id = $1`, "items", "id=[$1]"},
		{`SELECT * FROM items AS i WHERE i.id = $1 ORDER BY name LIMIT 3 OFFSET 1`, "items", "id=[$1]"},
		{`SELECT * FROM items WHERE items.id = $1`, "items", "id=[$1]"},
		{`SELECT * FROM public.items WHERE public.items.id = $1`, "items", "id=[$1]"},
		{`SELECT * FROM "Items" WHERE "Id" = $1`, "Items", "Id=[$1]"},
		{`SELECT count(*), max(extract(year from d)) FROM items WHERE tenant_id = $1 GROUP BY k HAVING count(*) > 1`, "items", "tenant_id=[$1]"},
		{`SELECT * FROM items WHERE id = $1 FOR UPDATE`, "items", "id=[$1]"},
		{`SELECT * FROM items`, "items", ""},
		{`SELECT * FROM items ORDER BY id`, "items", ""},
		{`SELECT * FROM items WHERE id IN (` + strings.Repeat("1, ", 40) + `2)`, "items", "id=[" + strings.Repeat("1 ", 40) + "2]"},
	} {
		f, ok := Filter(c.sql, false)
		if !ok {
			t.Errorf("%s: no filter", c.sql)
			continue
		}
		if f.Kind != KindSelect || f.Table != c.table || conds(f) != c.want {
			t.Errorf("%s: %v %q %q, want %q %q", c.sql, f.Kind, f.Table, conds(f), c.table, c.want)
		}
	}
}

// TestFilterRefuses is the hostile table: each statement's rows are not (or
// not provably) bounded by equality conditions of one table.
func TestFilterRefuses(t *testing.T) {
	for _, sql := range []string{
		`SELECT * FROM items WHERE id = 1 OR id = 2`,
		`SELECT * FROM items WHERE NOT id = 1`,
		`SELECT * FROM items WHERE id NOT IN (1, 2)`,
		`SELECT * FROM items WHERE id = 1 AND (name = 'a' OR name = 'b')`,
		`SELECT * FROM items WHERE (id = 1 OR id = 2)`,
		`SELECT * FROM items WHERE (id = 1) OR (id = 2)`,
		`SELECT * FROM items WHERE ((id = 1) OR id = 2)`,
		`SELECT * FROM items WHERE (id) = 1`,
		`SELECT * FROM items WHERE (id = 1`,
		`SELECT * FROM items WHERE (id = 1))`,
		`SELECT * FROM items WHERE ()`,
		`SELECT * FROM items WHERE NOT (id = 1)`,
		`SELECT * FROM items WHERE (id = 1) IS TRUE`,
		`SELECT * FROM items WHERE id IN (SELECT item_id FROM orders)`,
		`SELECT * FROM items WHERE id = (SELECT max(id) FROM items)`,
		`SELECT *, (SELECT 1 FROM orders) FROM items WHERE id = 1`,
		`SELECT * FROM items WHERE EXISTS (SELECT 1 FROM orders WHERE orders.item_id = items.id)`,
		`SELECT * FROM items WHERE lower(name) = 'x'`,
		`SELECT * FROM items WHERE id + 0 = 5`,
		`SELECT * FROM items WHERE id = 5 + 1`,
		`SELECT * FROM items WHERE id = $1::int`,
		`SELECT * FROM items WHERE id::text = $1`,
		`SELECT * FROM items WHERE CAST(id AS text) = $1`,
		`SELECT * FROM items WHERE name = 'x' COLLATE "C"`,
		`SELECT * FROM items WHERE id IS NULL`,
		`SELECT * FROM items WHERE id = 1 IS TRUE`,
		`SELECT * FROM items WHERE id > 3`,
		`SELECT * FROM items WHERE id <> 3`,
		`SELECT * FROM items WHERE id = ANY($1)`,
		`SELECT * FROM items WHERE id BETWEEN 1 AND 2`,
		`SELECT * FROM items WHERE name LIKE 'a%'`,
		`SELECT * FROM items WHERE name = E'a\'b'`,
		`SELECT * FROM items WHERE name = U&'a'`,
		`SELECT * FROM items WHERE name = $$a$$`,
		`SELECT * FROM items WHERE name = 'a\b'`,
		`SELECT * FROM items WHERE other.id = 1`,
		`SELECT * FROM items i WHERE items.id = 1`,
		`SELECT * FROM items JOIN orders ON orders.item_id = items.id WHERE items.id = 1`,
		`SELECT * FROM items, orders WHERE items.id = 1`,
		`SELECT * FROM items NATURAL JOIN orders WHERE id = 1`,
		`SELECT * FROM items LEFT JOIN orders USING (id) WHERE id = 1`,
		`WITH x AS (SELECT * FROM items) SELECT * FROM x WHERE id = 1`,
		`SELECT * FROM items WHERE id = 1 UNION SELECT * FROM items WHERE id = 2`,
		`SELECT * FROM items WHERE id = 1 EXCEPT SELECT * FROM items WHERE id = 2`,
		`SELECT * FROM ONLY items WHERE id = 1`,
		`SELECT * FROM items TABLESAMPLE SYSTEM (1) WHERE id = 1`,
		`SELECT * FROM items(1) WHERE id = 1`,
		`SELECT * FROM items AS i(a, b) WHERE a = 1`,
		`SELECT * FROM db.public.items WHERE id = 1`,
		`SELECT * FROM items WHERE id = 1; SELECT 1`,
		`SELECT * FROM items WHERE id = 1;`,
		`SELECT * INTO x FROM items WHERE id = 1`,
		`SELECT 1 WHERE 1 = 1`,
		`TABLE items`,
		`VALUES (1)`,
		`(SELECT * FROM items WHERE id = 1)`,
		`SELECT * FROM items WHERE id = 'unterminated`,
		`SELECT * FROM items WHERE row(id) = row(1)`,
		`SELECT * FROM items WHERE (id, k) = (1, 2)`,
		`SELECT * FROM items WHERE id = 1 AND`,
		`SELECT * FROM items WHERE id IN ()`,
		`SELECT * FROM items WHERE id IN (1, 2`,
		`SELECT * FROM items WHERE id = current_user`,
		`SELECT * FROM items WHERE id = 1 WINDOW w AS (PARTITION BY (SELECT 1))`,
		`SELECT * FROM items WHERE arr[1] = 5`,
		`SELECT * FROM items WHERE (rec).f = 5`,
		`SELECT * FROM items WHERE id = OPERATOR(pg_catalog.=) 1`,
		`SELECT * FROM items WHERE id === 1`,
		`SELECT * FROM items WHERE id = 1 AND id =`,
	} {
		if f, ok := Filter(sql, false); ok && len(f.Where) > 0 {
			t.Errorf("%s: filter %s, want none", sql, conds(f))
		}
	}
}

func TestFilterWrites(t *testing.T) {
	for _, c := range []struct {
		sql  string
		kind Kind
		want string // conditions | assignments | columns=rows
	}{
		{`UPDATE items SET name = $1 WHERE id = $2`, KindUpdate, "id=[$2] | name=$1"},
		{`UPDATE items SET id = id + 1 WHERE id = 5`, KindUpdate, "id=[5] | id=?"},
		{`UPDATE items SET id = 6, name = 'x' WHERE id = 5 RETURNING *`, KindUpdate, "id=[5] | id=6 name='x'"},
		{`UPDATE items i SET tenant_id = NULL WHERE i.tenant_id IN (1, 2)`, KindUpdate, "tenant_id=[1 2] | tenant_id=null"},
		{`UPDATE items SET n = (SELECT max(n) FROM other) WHERE id = 1`, KindUpdate, "id=[1] | n=?"},
		{`UPDATE items SET name = 'x'`, KindUpdate, " | name='x'"},
		{`DELETE FROM items WHERE id = $1`, KindDelete, "id=[$1] | "},
		{`UPDATE "items" AS "i" SET "name" = 'x' WHERE ("i"."id" = 5)`, KindUpdate, "id=[5] | name='x'"},
		{`DELETE FROM items WHERE (id = $1) AND (tenant_id = 2) RETURNING id`, KindDelete, "id=[$1] tenant_id=[2] | "},
		{`DELETE FROM public.items WHERE tenant_id = 7 AND id IN ($1, $2) RETURNING id`, KindDelete, "tenant_id=[7] id=[$1 $2] | "},
		{`DELETE FROM items`, KindDelete, " | "},
		{`INSERT INTO items (id, name) VALUES ($1, $2)`, KindInsert, "id,name=[$1 $2]"},
		{`INSERT INTO items (id, name) VALUES (1, 'a'), (2, lower('B')), (DEFAULT, 'c') RETURNING id`, KindInsert, "id,name=[1 'a'][2 ?][? 'c']"},
		{`INSERT INTO items AS x (id) VALUES (1)`, KindInsert, "id=[1]"},
	} {
		f, ok := Filter(c.sql, false)
		if !ok {
			t.Errorf("%s: no filter", c.sql)
			continue
		}
		var got string
		if f.Kind == KindInsert {
			got = strings.Join(f.Columns, ",") + "="
			for _, r := range f.Rows {
				got += operands(r)
			}
		} else {
			var sets []string
			for _, a := range f.Set {
				sets = append(sets, a.Column+"="+operand(a.Value))
			}
			got = conds(f) + " | " + strings.Join(sets, " ")
		}
		if f.Kind != c.kind || got != c.want || f.Table != "items" {
			t.Errorf("%s: %v %s %q, want %v %q", c.sql, f.Kind, f.Table, got, c.kind, c.want)
		}
	}
	for _, sql := range []string{
		`UPDATE items SET name = 'x' FROM other WHERE other.id = items.id`,
		`UPDATE items SET name = 'x' WHERE CURRENT OF c`,
		`UPDATE items SET (a, b) = (1, 2) WHERE id = 1`,
		`UPDATE items SET arr[1] = 2 WHERE id = 1`,
		`UPDATE items SET name = 'x' WHERE id = 1 OR id = 2`,
		`UPDATE items SET name = 'x' WHERE id IN (SELECT id FROM other)`,
		`UPDATE ONLY items SET name = 'x' WHERE id = 1`,
		`WITH d AS (DELETE FROM other RETURNING id) UPDATE items SET name = 'x' WHERE id = 1`,
		`DELETE FROM items USING other WHERE other.id = items.id`,
		`DELETE FROM items WHERE id > 3`,
		`INSERT INTO items VALUES (1, 'a')`,
		`INSERT INTO items (id) SELECT id FROM other`,
		`INSERT INTO items (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET id = 2`,
		`INSERT INTO items (id) VALUES (1) ON CONFLICT DO NOTHING`,
		`INSERT INTO items (id, name) VALUES (1)`,
		`INSERT INTO items (id) OVERRIDING SYSTEM VALUE VALUES (1)`,
		`INSERT INTO items DEFAULT VALUES`,
		`MERGE INTO items USING other ON other.id = items.id WHEN MATCHED THEN DELETE`,
		`UPDATE items SET name = 'x' WHERE id = 1; DELETE FROM items`,
	} {
		if f, ok := Filter(sql, false); ok {
			t.Errorf("%s: filter %+v, want none", sql, f)
		}
	}
}

// TestFilterLongList: an IN list longer than the lexer's list limit keeps
// every value (the classifier drops the middle of long lists).
func TestFilterLongList(t *testing.T) {
	var vals []string
	for i := range 100 {
		vals = append(vals, fmt.Sprint(i))
	}
	f, ok := Filter(`SELECT * FROM items WHERE id IN (`+strings.Join(vals, ", ")+`)`, false)
	if !ok || len(f.Where) != 1 || len(f.Where[0].Values) != 100 || f.Where[0].Values[57].Text != "57" {
		t.Fatalf("long IN list: %v %+v", ok, f)
	}
}

func TestFilterNonStandard(t *testing.T) {
	// With standard_conforming_strings off, 'a\' AND id = 1 --' is one string.
	if f, ok := Filter(`SELECT * FROM items WHERE name = 'a\' AND id = 1 --'`, true); ok && len(f.Where) > 0 {
		t.Fatalf("backslash string taken as a value: %s", conds(f))
	}
}
