package verdict_test

import (
	"testing"

	"github.com/sqlflight/sqlflight/internal/verdict"
)

func TestCanonicalValues(t *testing.T) {
	for _, c := range []struct {
		class verdict.ColClass
		v     any
		want  string
		ok    bool
	}{
		{verdict.ClassInt, int64(5), "5", true},
		{verdict.ClassInt, 5, "5", true},
		{verdict.ClassInt, int32(-5), "-5", true},
		{verdict.ClassInt, "5", "5", true},
		{verdict.ClassInt, "+05", "5", true},
		{verdict.ClassInt, " 5", "", false},
		{verdict.ClassInt, 5.0, "", false},
		{verdict.ClassInt, true, "", false},
		{verdict.ClassText, "Ab ", "Ab ", true},
		{verdict.ClassText, []byte("x"), "x", true},
		{verdict.ClassText, int64(5), "", false},
		{verdict.ClassUUID, "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", true},
		{verdict.ClassUUID, "{a0eebc999c0b4ef8bb6d6bb9bd380a11}", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", true},
		{verdict.ClassUUID, [16]byte{0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8, 0xbb, 0x6d, 0x6b, 0xb9, 0xbd, 0x38, 0x0a, 0x11},
			"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", true},
		{verdict.ClassUUID, "a0eebc99", "", false},
		{verdict.ClassUUID, []byte("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"), "", false},
		{verdict.ClassBool, true, "t", true},
		{verdict.ClassBool, "false", "f", true},
		{verdict.ClassBool, "yes", "", false},
		{verdict.ClassNone, "5", "", false},
	} {
		got, ok := verdict.CanonArg(c.class, c.v)
		if got != c.want || ok != c.ok {
			t.Errorf("CanonArg(%d, %#v) = %q, %v; want %q, %v", c.class, c.v, got, ok, c.want, c.ok)
		}
	}
}
