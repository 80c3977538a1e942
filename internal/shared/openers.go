package shared

import (
	"fmt"
	"io"
	"net/url"
	"sort"
	"sync"
)

// Openers are the tiers T a DSN may name (the sqlflight.shared
// parameter), by URL scheme, and those it opened: one per target, shared
// by every DSN naming it, and closed (if it is an io.Closer) when the last
// of them gives it back. The zero value has none registered; it is safe
// for concurrent use.
type Openers[T any] struct {
	mu   sync.Mutex
	m    map[string]func(target string) (T, error)
	open map[string]*opened[T] // by target
}

// opened is a tier opened from a DSN, with the count of its users.
type opened[T any] struct {
	t    T
	refs int
}

// Register makes open the opener of targets of scheme. It panics if the
// scheme is taken.
func (o *Openers[T]) Register(scheme string, open func(target string) (T, error)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[string]func(string) (T, error){}
		o.open = map[string]*opened[T]{}
	}
	if _, dup := o.m[scheme]; dup {
		panic("sqlflight: RegisterTier called twice for scheme " + scheme)
	}
	o.m[scheme] = open
}

// Open returns the tier target names, opening it on first use, and the
// function that gives it back (once, whatever the number of its calls):
// the last user to give a tier back closes it.
func (o *Openers[T]) Open(target string) (T, func(), error) {
	var none T
	u, err := url.Parse(target)
	if err != nil || u.Scheme == "" {
		return none, nil, fmt.Errorf("not a URL (want e.g. redis://host:6379/0)")
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	ot := o.open[target]
	if ot == nil {
		open := o.m[u.Scheme]
		if open == nil {
			var known []string
			for k := range o.m {
				known = append(known, k)
			}
			sort.Strings(known)
			return none, nil, fmt.Errorf("no shared tier registered for scheme %q (registered: %v; import github.com/sqlflight/sqlflight/redistier for redis)", u.Scheme, known)
		}
		t, err := open(target)
		if err != nil {
			return none, nil, err
		}
		ot = &opened[T]{t: t}
		o.open[target] = ot
	}
	ot.refs++
	var once sync.Once
	release := func() {
		once.Do(func() {
			o.mu.Lock()
			ot.refs--
			last := ot.refs == 0
			if last {
				delete(o.open, target)
			}
			o.mu.Unlock()
			if c, ok := any(ot.t).(io.Closer); ok && last {
				_ = c.Close()
			}
		})
	}
	return ot.t, release, nil
}
