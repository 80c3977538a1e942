package annotation_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/annotation"
)

// JSON has every field of Fields, in order, and reads back what it writes,
// durations as Go duration strings.
func TestJSONRoundTrip(t *testing.T) {
	f, j := reflect.TypeOf(annotation.Fields{}), reflect.TypeOf(annotation.JSON{})
	if f.NumField() != j.NumField() {
		t.Fatalf("Fields has %d fields, JSON %d", f.NumField(), j.NumField())
	}
	for i := range f.NumField() {
		if f.Field(i).Name != j.Field(i).Name {
			t.Errorf("field %d: %s vs %s", i, f.Field(i).Name, j.Field(i).Name)
		}
	}
	full := annotation.Fields{Soft: 30 * time.Second, Hard: 5 * time.Minute, Neg: 3, Jitter: 4, Beta: 5, MaxRows: 6,
		MaxBytes: 7, Wait: 250 * time.Millisecond, Timeout: 9, Tables: []string{"t"}, Name: "n", Coalesce: true,
		NoCoalesce: true, NoCache: true, Off: true}
	b, err := json.Marshal(annotation.ToJSON(full))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"soft":"30s"`, `"hard":"5m0s"`, `"wait":"250ms"`, `"neg":"3ns"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON lacks %s: %s", want, b)
		}
	}
	var back annotation.JSON
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if got := back.Fields(); !reflect.DeepEqual(got, full) {
		t.Errorf("round trip %+v, want %+v", got, full)
	}
	if b, _ := json.Marshal(annotation.ToJSON(annotation.Fields{})); string(b) != "{}" {
		t.Errorf("empty fields encode as %s", b)
	}
}

// A duration also reads as a number of nanoseconds; anything else fails.
func TestJSONDuration(t *testing.T) {
	var d annotation.JSONDuration
	if err := json.Unmarshal([]byte("1000000000"), &d); err != nil || time.Duration(d) != time.Second {
		t.Errorf("nanoseconds: %v, %v", err, time.Duration(d))
	}
	for _, bad := range []string{`"soon"`, `true`, `1.5`} {
		if err := json.Unmarshal([]byte(bad), &d); err == nil || !strings.HasPrefix(err.Error(), "sqlflight: ") {
			t.Errorf("%s: %v", bad, err)
		}
	}
}
