// Package seal authenticates (and optionally encrypts) what sqlflight keeps
// in its shared tier, under keys derived from a fleet secret. The tier
// (Redis) is storage that sqlflight does not trust: whoever can write to it
// must not be able to make an instance serve a row, or act on an
// invalidation, that no instance of the fleet produced.
//
// One secret gives independent keys (HKDF-SHA256, one label each): a key
// for the MACs of values, one for the MACs of invalidation messages and one
// from which the encryption key of each value is derived. A Ring holds the
// keys of the current secret, used to write and read, and optionally those
// of a previous secret, accepted for reading only, so that a fleet can
// change its secret without a cold tier: first give every instance the new
// secret with the old one as previous, then drop the previous one.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash"
	"sync"
)

// Value formats: the first byte of a sealed value.
const (
	formatMAC     = 2 // format | tag (16) | body
	formatEncrypt = 3 // format | salt (16) | AES-256-GCM(body) with its tag (16)
)

// TagLen is the length of a MAC tag (HMAC-SHA256 truncated to 128 bits).
const TagLen = 16

const saltLen = 16

// Prefix is the room SealValue needs in front of a value's body (see
// SealValue).
const Prefix = 1 + TagLen

var (
	// ErrForged is returned for a value or message whose tag fails under
	// every key of the ring.
	ErrForged = errors.New("seal: authentication failed")
	// ErrFormat is returned for a value too short or of an unknown format.
	ErrFormat = errors.New("seal: not a sealed value")
)

// Keys are the keys derived from one secret.
type Keys struct {
	value, message *macPool
	encrypt        *macPool // HMAC under the encryption key: derives each value's key
}

// Derive returns the keys of secret. Every label gives an independent key:
// knowing one tells nothing of the others.
func Derive(secret []byte) *Keys {
	k := func(label string) []byte {
		b, err := hkdf.Key(sha256.New, secret, []byte("sqlflight shared tier"), label, 32)
		if err != nil {
			panic("seal: " + err.Error()) // only for lengths out of HKDF's range
		}
		return b
	}
	return &Keys{
		value:   newMACPool(k("value mac v1")),
		message: newMACPool(k("invalidation mac v1")),
		encrypt: newMACPool(k("value encryption v1")),
	}
}

// macPool keeps HMAC states of one key, with scratch space, so that a MAC
// costs no allocation of its own.
type macPool struct{ p sync.Pool }

type macState struct {
	h   hash.Hash
	buf []byte
	sum [sha256.Size]byte
}

func newMACPool(key []byte) *macPool {
	m := &macPool{}
	m.p.New = func() any { return &macState{h: hmac.New(sha256.New, key), buf: make([]byte, 0, 256)} }
	return m
}

func (m *macPool) get() *macState {
	st := m.p.Get().(*macState)
	st.h.Reset()
	return st
}

func (m *macPool) put(st *macState) {
	if cap(st.buf) <= 4096 { // a huge namespace or key is not kept
		m.p.Put(st)
	}
}

// A Ring is the keys an instance uses: Current writes and reads, Previous
// (if not nil) only reads. Encrypt makes SealValue encrypt. Values of
// either format are read whatever Encrypt says.
type Ring struct {
	Current  *Keys
	Previous *Keys
	Encrypt  bool

	// NoVerify makes OpenValue accept a value in the MAC format without
	// checking its tag, and CheckMessage accept every tag: for fuzzing what
	// lies behind the MAC, never for production.
	NoVerify bool
}

// valueAD writes what a value's tag (or its encryption's additional data)
// binds it to besides its body: the namespace, the key and the version.
func valueAD(h []byte, format byte, ns, key string, version uint64) []byte {
	h = append(h, "sqlflight/value\x00"...)
	h = append(h, format)
	h = binary.AppendUvarint(h, uint64(len(ns)))
	h = append(h, ns...)
	h = binary.AppendUvarint(h, uint64(len(key)))
	h = append(h, key...)
	return binary.BigEndian.AppendUint64(h, version)
}

// SealValue seals b, whose first Prefix bytes are room left for it and the
// rest the value's body, as the value of key in namespace ns at version.
// In the MAC format it fills the room and returns b; encrypted, it returns
// a new slice.
func (r *Ring) SealValue(b []byte, ns, key string, version uint64) []byte {
	body := b[Prefix:]
	if r.Encrypt {
		out := make([]byte, 1+saltLen, 1+saltLen+len(body)+16)
		out[0] = formatEncrypt
		_, _ = rand.Read(out[1 : 1+saltLen]) // never fails (crypto/rand)
		aead := valueAEAD(r.Current.encrypt, out[1:1+saltLen])
		return aead.Seal(out, zeroNonce[:], body, valueAD(nil, formatEncrypt, ns, key, version))
	}
	b[0] = formatMAC
	r.Current.valueTag(b[1:Prefix], ns, key, version, body)
	return b
}

var zeroNonce [12]byte

// valueAEAD is the AES-256-GCM of one value: its key is derived from the
// encryption key and the value's random salt, so that a key encrypts one
// value and the random 96-bit nonces of GCM, with their limit of 2^32
// messages per key, never come into play (the nonce is fixed).
func valueAEAD(key *macPool, salt []byte) cipher.AEAD {
	st := key.get()
	st.h.Write(salt)
	block, err := aes.NewCipher(st.h.Sum(st.sum[:0])) // copies the key
	key.put(st)
	if err != nil {
		panic("seal: " + err.Error())
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic("seal: " + err.Error())
	}
	return aead
}

func (k *Keys) valueTag(dst []byte, ns, key string, version uint64, body []byte) {
	st := k.value.get()
	st.buf = valueAD(st.buf[:0], formatMAC, ns, key, version)
	st.h.Write(st.buf)
	st.h.Write(body)
	copy(dst, st.h.Sum(st.sum[:0]))
	k.value.put(st)
}

// OpenValue checks b, a value read as key's in namespace ns at version, and
// returns its body. A value sealed for another namespace, key or version,
// altered in any byte, or sealed under a secret that is neither the ring's
// current nor its previous one fails with ErrForged.
func (r *Ring) OpenValue(b []byte, ns, key string, version uint64) ([]byte, error) {
	if len(b) == 0 {
		return nil, ErrFormat
	}
	switch b[0] {
	case formatMAC:
		if len(b) < Prefix {
			return nil, ErrFormat
		}
		if r.NoVerify {
			return b[Prefix:], nil
		}
		for _, k := range r.keys() {
			var tag [TagLen]byte
			k.valueTag(tag[:], ns, key, version, b[Prefix:])
			if hmac.Equal(tag[:], b[1:Prefix]) {
				return b[Prefix:], nil
			}
		}
		return nil, ErrForged
	case formatEncrypt:
		if len(b) < 1+saltLen+16 {
			return nil, ErrFormat
		}
		a := valueAD(nil, formatEncrypt, ns, key, version)
		for _, k := range r.keys() {
			aead := valueAEAD(k.encrypt, b[1:1+saltLen])
			if body, err := aead.Open(nil, zeroNonce[:], b[1+saltLen:], a); err == nil {
				return body, nil
			}
		}
		return nil, ErrForged
	}
	return nil, ErrFormat
}

func (r *Ring) keys() []*Keys {
	if r.Previous == nil {
		return []*Keys{r.Current}
	}
	return []*Keys{r.Current, r.Previous}
}

// MessageTag is the tag of an invalidation: the namespace it is published
// in, its sequence number, whether it is a write to every table, the
// publishing instance and the tables, in order.
func (r *Ring) MessageTag(ns string, seq uint64, all bool, source string, tables []string) []byte {
	return r.MessageTagRows(ns, seq, all, source, tables, nil)
}

// MessageTagRows is MessageTag for an invalidation that also carries row
// writes, given as the flat list of strings rows (the caller's canonical
// form, counts included, so that it reads one way only). Without rows it
// is MessageTag's tag.
func (r *Ring) MessageTagRows(ns string, seq uint64, all bool, source string, tables, rows []string) []byte {
	tag := make([]byte, TagLen)
	r.Current.messageTag(tag, ns, seq, all, source, tables, rows)
	return tag
}

func (k *Keys) messageTag(dst []byte, ns string, seq uint64, all bool, source string, tables, rows []string) {
	st := k.message.get()
	b := append(st.buf[:0], "sqlflight/invalidation\x00"...)
	w := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	w(ns)
	b = binary.BigEndian.AppendUint64(b, seq)
	if all {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	w(source)
	b = binary.AppendUvarint(b, uint64(len(tables)))
	for _, t := range tables {
		w(t)
	}
	if len(rows) > 0 {
		// Absent for a message of tables alone, whose tag stays the one
		// fleets before row writes computed.
		b = append(b, "rows\x00"...)
		b = binary.AppendUvarint(b, uint64(len(rows)))
		for _, s := range rows {
			w(s)
		}
	}
	st.h.Write(b)
	st.buf = b
	copy(dst, st.h.Sum(st.sum[:0]))
	k.message.put(st)
}

// CheckMessage reports whether tag is the tag of the invalidation under
// the current or the previous secret.
func (r *Ring) CheckMessage(tag []byte, ns string, seq uint64, all bool, source string, tables []string) bool {
	return r.CheckMessageRows(tag, ns, seq, all, source, tables, nil)
}

// CheckMessageRows is CheckMessage for an invalidation with rows (see
// MessageTagRows).
func (r *Ring) CheckMessageRows(tag []byte, ns string, seq uint64, all bool, source string, tables, rows []string) bool {
	if r.NoVerify {
		return true
	}
	if len(tag) != TagLen {
		return false
	}
	for _, k := range r.keys() {
		var want [TagLen]byte
		k.messageTag(want[:], ns, seq, all, source, tables, rows)
		if hmac.Equal(want[:], tag) {
			return true
		}
	}
	return false
}
