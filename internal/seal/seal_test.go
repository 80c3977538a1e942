package seal

import (
	"bytes"
	"errors"
	"testing"
)

func sealed(r *Ring, ns, key string, version uint64, body []byte) []byte {
	b := append(make([]byte, Prefix), body...)
	return r.SealValue(b, ns, key, version)
}

func TestValueRoundTripAndTamper(t *testing.T) {
	body := []byte("header and wire bytes of a ten-row result")
	for _, encrypt := range []bool{false, true} {
		r := &Ring{Current: Derive([]byte("a fleet secret of 32 bytes......")), Encrypt: encrypt}
		v := sealed(r, "ns:", "k1", 42, body)
		if encrypt == bytes.Contains(v, body) {
			t.Fatalf("encrypt=%v: body in clear = %v", encrypt, bytes.Contains(v, body))
		}
		got, err := r.OpenValue(bytes.Clone(v), "ns:", "k1", 42)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("encrypt=%v: open = %q, %v", encrypt, got, err)
		}
		// Every byte of the value matters: format, tag or salt, body.
		for i := range v {
			x := bytes.Clone(v)
			x[i] ^= 0x01
			if _, err := r.OpenValue(x, "ns:", "k1", 42); err == nil {
				t.Fatalf("encrypt=%v: byte %d flipped, still opens", encrypt, i)
			}
		}
		// Truncated or extended.
		for _, x := range [][]byte{v[:len(v)-1], append(bytes.Clone(v), 0), v[:1], nil} {
			if _, err := r.OpenValue(x, "ns:", "k1", 42); err == nil {
				t.Fatalf("encrypt=%v: %d of %d bytes open", encrypt, len(x), len(v))
			}
		}
		// Bound to its namespace, key and version.
		for _, c := range []struct {
			ns, key string
			v       uint64
		}{{"ns2:", "k1", 42}, {"ns:", "k2", 42}, {"ns:", "k1", 43}, {"ns:k", "1", 42}, {"n", "s:k1", 42}} {
			if _, err := r.OpenValue(bytes.Clone(v), c.ns, c.key, c.v); !errors.Is(err, ErrForged) {
				t.Fatalf("encrypt=%v: opened as %q %q %d: %v", encrypt, c.ns, c.key, c.v, err)
			}
		}
		// Another secret cannot read it.
		other := &Ring{Current: Derive([]byte("another secret of 32 bytes......"))}
		if _, err := other.OpenValue(bytes.Clone(v), "ns:", "k1", 42); !errors.Is(err, ErrForged) {
			t.Fatalf("encrypt=%v: another secret opens: %v", encrypt, err)
		}
	}
}

// TestRotation: a ring reads what its previous secret sealed, and seals
// only under its current one.
func TestRotation(t *testing.T) {
	oldK, newK := Derive([]byte("the old secret, 32 bytes long..")), Derive([]byte("the new secret, 32 bytes long.."))
	body := []byte("rows")
	for _, encrypt := range []bool{false, true} {
		before := &Ring{Current: oldK, Encrypt: encrypt}
		during := &Ring{Current: newK, Previous: oldK, Encrypt: encrypt}
		after := &Ring{Current: newK, Encrypt: encrypt}
		v := sealed(before, "ns:", "k", 7, body)
		if got, err := during.OpenValue(bytes.Clone(v), "ns:", "k", 7); err != nil || !bytes.Equal(got, body) {
			t.Fatalf("encrypt=%v: previous secret not accepted: %v", encrypt, err)
		}
		if _, err := after.OpenValue(bytes.Clone(v), "ns:", "k", 7); err == nil {
			t.Fatalf("encrypt=%v: a secret dropped from the ring still opens", encrypt)
		}
		w := sealed(during, "ns:", "k", 7, body)
		if _, err := before.OpenValue(bytes.Clone(w), "ns:", "k", 7); err == nil {
			t.Fatalf("encrypt=%v: written under the previous secret", encrypt)
		}
		if _, err := after.OpenValue(bytes.Clone(w), "ns:", "k", 7); err != nil {
			t.Fatalf("encrypt=%v: written under the current secret: %v", encrypt, err)
		}

		tag := before.MessageTag("ns:", 9, false, "src", []string{"a"})
		if !during.CheckMessage(tag, "ns:", 9, false, "src", []string{"a"}) {
			t.Fatal("a message of the previous secret is refused")
		}
		if after.CheckMessage(tag, "ns:", 9, false, "src", []string{"a"}) {
			t.Fatal("a message of a dropped secret is accepted")
		}
		if before.CheckMessage(during.MessageTag("ns:", 9, false, "src", []string{"a"}), "ns:", 9, false, "src", []string{"a"}) {
			t.Fatal("a message tagged under the previous secret")
		}
	}
}

func TestMessageTagCoversEveryField(t *testing.T) {
	r := &Ring{Current: Derive([]byte("a fleet secret of 32 bytes......"))}
	tag := r.MessageTag("ns:", 100, false, "src", []string{"a", "b"})
	if !r.CheckMessage(tag, "ns:", 100, false, "src", []string{"a", "b"}) {
		t.Fatal("own tag refused")
	}
	for name, ok := range map[string]bool{
		"ns":         r.CheckMessage(tag, "ns2:", 100, false, "src", []string{"a", "b"}),
		"seq":        r.CheckMessage(tag, "ns:", 101, false, "src", []string{"a", "b"}),
		"all":        r.CheckMessage(tag, "ns:", 100, true, "src", []string{"a", "b"}),
		"source":     r.CheckMessage(tag, "ns:", 100, false, "src2", []string{"a", "b"}),
		"tables":     r.CheckMessage(tag, "ns:", 100, false, "src", []string{"a"}),
		"order":      r.CheckMessage(tag, "ns:", 100, false, "src", []string{"b", "a"}),
		"boundaries": r.CheckMessage(tag, "ns:", 100, false, "src", []string{"ab"}),
		"short tag":  r.CheckMessage(tag[:8], "ns:", 100, false, "src", []string{"a", "b"}),
		"no tag":     r.CheckMessage(nil, "ns:", 100, false, "src", []string{"a", "b"}),
	} {
		if ok {
			t.Errorf("%s changed, tag still accepted", name)
		}
	}
}

// TestKeysAreSeparate: a value tag is no message tag, and two secrets give
// unrelated keys.
func TestKeysAreSeparate(t *testing.T) {
	k := Derive([]byte("a fleet secret of 32 bytes......"))
	k2 := Derive([]byte("a fleet secret of 32 bytes.....!"))
	var a1, a2 [TagLen]byte
	k.valueTag(a1[:], "ns", "x", 1, nil)
	k2.valueTag(a2[:], "ns", "x", 1, nil)
	if a1 == a2 {
		t.Fatal("two secrets, one key")
	}
	var a, b [TagLen]byte
	k.valueTag(a[:], "ns", "x", 1, nil)
	st := k.message.get()
	st.h.Write(valueAD(nil, formatMAC, "ns", "x", 1))
	copy(b[:], st.h.Sum(nil))
	if a == b {
		t.Fatal("value and message MACs share a key")
	}
}

func BenchmarkSealValue(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 600) // about a ten-row result
	for _, encrypt := range []bool{false, true} {
		r := &Ring{Current: Derive([]byte("a fleet secret of 32 bytes......")), Encrypt: encrypt}
		name := "mac"
		if encrypt {
			name = "aes-gcm"
		}
		b.Run(name+"/seal", func(b *testing.B) {
			buf := append(make([]byte, Prefix), body...)
			b.ReportAllocs()
			for b.Loop() {
				r.SealValue(buf, "sqlflight:", "0123456789abcdef0123456789abcdef", 1234567890)
			}
		})
		v := sealed(r, "sqlflight:", "0123456789abcdef0123456789abcdef", 1234567890, body)
		b.Run(name+"/open", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.OpenValue(v, "sqlflight:", "0123456789abcdef0123456789abcdef", 1234567890); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
