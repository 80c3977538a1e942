package sqlflight

import (
	"net"
	"net/http"
	"slices"
	"strings"
)

// LivePageOptions configure the live page of HandlerWith.
type LivePageOptions struct {
	// AllowedHosts are the host names (without port, compared without
	// regard to case) the page answers besides localhost and IP literals.
	// A request whose Host header names any other host is refused with 421
	// Misdirected Request: a web page in an operator's browser cannot read
	// the live page through DNS rebinding.
	AllowedHosts []string
}

// HandlerWith is Handler with options.
func HandlerWith(s *Shield, o LivePageOptions) http.Handler { return &liveHandler{s: s, opts: o} }

// hostAllowed reports whether the live page answers a request for host (a
// Host header: name or IP literal, with or without a port).
func (o LivePageOptions) hostAllowed(host string) bool {
	h := host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		h = hh
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if h == "" {
		return false
	}
	if net.ParseIP(h) != nil || strings.EqualFold(h, "localhost") {
		return true
	}
	return slices.ContainsFunc(o.AllowedHosts, func(a string) bool { return strings.EqualFold(a, h) })
}
