package livepage

import (
	"net"
	"slices"
	"strings"
)

// hostAllowed reports whether the page answers a request for host (a
// Host header: name or IP literal, with or without a port): an IP
// literal, localhost, or one of o.AllowedHosts, without regard to case;
// never an empty host.
func (o Options) hostAllowed(host string) bool {
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
