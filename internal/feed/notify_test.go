package feed

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// changeString formats changes for comparison: table, whole, and the old and
// new maps with NULL as <null> and each map's columns sorted.
func changeString(cs []Change) string {
	var b strings.Builder
	row := func(m map[string]*string) string {
		if m == nil {
			return "-"
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			if m[k] == nil {
				parts[i] = fmt.Sprintf("%q=<null>", k)
			} else {
				parts[i] = fmt.Sprintf("%q=%q", k, *m[k])
			}
		}
		return "{" + strings.Join(parts, " ") + "}"
	}
	for _, c := range cs {
		fmt.Fprintf(&b, "[%q whole=%v old=%s new=%s]", c.Table, c.Whole, row(c.Old), row(c.New))
	}
	return b.String()
}

func TestParseChangeNotification(t *testing.T) {
	all := "[\"\" whole=true old=- new=-]"
	for _, tc := range []struct {
		name, payload, want string
	}{
		{"insert",
			`{"v":1,"s":"public","t":"items","op":"I","c":["id","name"],"n":[["1","a"],["2",null]]}`,
			`["public.items" whole=false old=- new={"id"="1" "name"="a"}]["public.items" whole=false old=- new={"id"="2" "name"=<null>}]`},
		{"update splits old and new",
			`{"v":1,"s":"public","t":"items","op":"U","c":["id","name"],"o":[["1","a"]],"n":[["1","b"]]}`,
			`["public.items" whole=false old={"id"="1" "name"="a"} new=-]["public.items" whole=false old=- new={"id"="1" "name"="b"}]`},
		{"delete with unknown value",
			`{"v":1,"s":"s","t":"t","op":"D","c":["id","big"],"o":[["7",false]]}`,
			`["s.t" whole=false old={"id"="7"} new=-]`},
		{"odd identifiers and values",
			`{"v":1,"s":"My \"S\"","t":"a.b","op":"I","c":["x y","é"],"n":[["it's\n\"q\"\\\u0001","日本"]]}`,
			"[\"My \\\"S\\\".a.b\" whole=false old=- new={\"x y\"=\"it's\\n\\\"q\\\"\\\\\\x01\" \"é\"=\"日本\"}]"},
		{"truncate",
			`{"v":1,"s":"public","t":"items","op":"T","w":true}`,
			`["public.items" whole=true old=- new=-]`},
		{"degraded",
			`{"v":1,"s":"public","t":"items","op":"U","w":true}`,
			`["public.items" whole=true old=- new=-]`},
		{"partition tree",
			`{"v":1,"s":"public","t":"p1","op":"I","r":[["public","p"]],"c":["id"],"n":[["3"]]}`,
			`["public.p1" whole=false old=- new={"id"="3"}]["public.p" whole=false old=- new={"id"="3"}]`},
		{"partition tree whole",
			`{"v":1,"s":"public","t":"p","op":"T","r":[["public","p1"],["x","p2"]],"w":true}`,
			`["public.p" whole=true old=- new=-]["public.p1" whole=true old=- new=-]["x.p2" whole=true old=- new=-]`},
		{"all", `{"v":1,"op":"U","all":true}`, all},
		{"empty", ``, all},
		{"not json", `hello`, all},
		{"another version", `{"v":2,"s":"public","t":"items","op":"T","w":true}`, all},
		{"unknown field", `{"v":1,"s":"public","t":"items","op":"T","w":true,"x":1}`, all},
		{"trailing data", `{"v":1,"s":"public","t":"items","op":"T","w":true} {}`, all},
		{"no table", `{"v":1,"s":"public","op":"T","w":true}`, all},
		{"empty table", `{"v":1,"s":"public","t":"","op":"T","w":true}`, all},
		{"bad op", `{"v":1,"s":"public","t":"items","op":"X","w":true}`, all},
		{"whole with rows", `{"v":1,"s":"public","t":"items","op":"U","w":true,"c":["id"],"n":[["1"]]}`, all},
		{"no rows", `{"v":1,"s":"public","t":"items","op":"U","c":["id"]}`, all},
		{"no columns", `{"v":1,"s":"public","t":"items","op":"U","c":[],"n":[[]]}`, all},
		{"insert with old rows", `{"v":1,"s":"s","t":"t","op":"I","c":["id"],"o":[["1"]]}`, all},
		{"delete with new rows", `{"v":1,"s":"s","t":"t","op":"D","c":["id"],"n":[["1"]]}`, all},
		{"short row", `{"v":1,"s":"s","t":"t","op":"I","c":["id","x"],"n":[["1"]]}`, all},
		{"long row", `{"v":1,"s":"s","t":"t","op":"I","c":["id"],"n":[["1","2"]]}`, all},
		{"number value", `{"v":1,"s":"s","t":"t","op":"I","c":["id"],"n":[[1]]}`, all},
		{"true value", `{"v":1,"s":"s","t":"t","op":"I","c":["id"],"n":[[true]]}`, all},
		{"object value", `{"v":1,"s":"s","t":"t","op":"I","c":["id"],"n":[[{}]]}`, all},
		{"duplicate column", `{"v":1,"s":"s","t":"t","op":"I","c":["id","id"],"n":[["1","2"]]}`, all},
		{"empty column", `{"v":1,"s":"s","t":"t","op":"I","c":[""],"n":[["1"]]}`, all},
		{"bad related", `{"v":1,"s":"s","t":"t","op":"T","w":true,"r":[["s"]]}`, all},
		{"lone surrogate", `{"v":1,"s":"s","t":"t","op":"I","c":["id"],"n":[["\udc00"]]}`, all},
		{"latin escape", `{"v":1,"s":"s","t":"t","op":"I","c":["id"],"n":[["\u0041"]]}`, `["s.t" whole=false old=- new={"id"="A"}]`},
		{"escape beyond latin", `{"v":1,"s":"s","t":"t","op":"I","c":["id"],"n":[["\u0100"]]}`, all},
		{"invalid utf-8", "{\"v\":1,\"s\":\"s\",\"t\":\"t\",\"op\":\"I\",\"c\":[\"id\"],\"n\":[[\"\xff\"]]}", all},
		{"too long", `{"v":1,"s":"s","t":"t","op":"I","c":["id"],"n":[["` + strings.Repeat("x", maxNotifyPayload) + `"]]}`, all},
		{"deeply nested", strings.Repeat("[", 5000) + strings.Repeat("]", 2999), all},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := changeString(parseChangeNotification(tc.payload)); got != tc.want {
				t.Errorf("parse %.200q\n got %s\nwant %s", tc.payload, got, tc.want)
			}
		})
	}
}

// TestParseChangeNotificationBoundsPartitionFanOut: many rows times many
// tables of a partition tree report the other tables whole rather than
// multiplying the rows.
func TestParseChangeNotificationBoundsPartitionFanOut(t *testing.T) {
	var rows, related []string
	for i := 0; i < 500; i++ {
		rows = append(rows, fmt.Sprintf(`["%d"]`, i))
	}
	for i := 0; i < 20; i++ {
		related = append(related, fmt.Sprintf(`["s","p%d"]`, i))
	}
	payload := `{"v":1,"s":"s","t":"p","op":"I","r":[` + strings.Join(related, ",") + `],"c":["id"],"n":[` + strings.Join(rows, ",") + `]}`
	cs := parseChangeNotification(payload)
	if len(cs) != 500+20 {
		t.Fatalf("got %d changes, want 520", len(cs))
	}
	for _, c := range cs[500:] {
		if !c.Whole || c.New != nil || !strings.HasPrefix(c.Table, "s.p") {
			t.Fatalf("fan-out change %s, want whole", changeString([]Change{c}))
		}
	}
	if !reflect.DeepEqual(cs[0].New, map[string]*string{"id": ptr("0")}) {
		t.Fatalf("first row %s", changeString(cs[:1]))
	}
}

func ptr(s string) *string { return &s }

// FuzzParseChangeNotification: any payload parses without a panic, into
// changes that either name a table or say "every table", with rows only for
// named tables.
func FuzzParseChangeNotification(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"s":"public","t":"items","op":"U","c":["id","name"],"o":[["1","a"]],"n":[["1",null]]}`,
		`{"v":1,"s":"public","t":"p","op":"T","r":[["public","p1"]],"w":true}`,
		`{"v":1,"op":"U","all":true}`,
		`{"v":1,"s":"s","t":"t","op":"D","c":["id"],"o":[[false]]}`,
		"", "[[[[", "\xff",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, payload string) {
		cs := parseChangeNotification(payload)
		if len(cs) == 0 {
			t.Fatalf("no change for %q", payload)
		}
		for _, c := range cs {
			if c.Table == "" && (!c.Whole || len(cs) != 1) {
				t.Fatalf("every-table change mixed with others for %q: %s", payload, changeString(cs))
			}
			if c.Whole && (c.Old != nil || c.New != nil) {
				t.Fatalf("whole change with rows for %q", payload)
			}
			if !c.Whole && c.Old == nil && c.New == nil {
				t.Fatalf("row change without rows for %q", payload)
			}
		}
	})
}
