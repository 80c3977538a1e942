package sqlflight

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestLivePageHost: the live page refuses a Host it was not told of (DNS
// rebinding) and answers loopback, IP literals and the named hosts.
func TestLivePageHost(t *testing.T) {
	s := New()
	t.Cleanup(func() { _ = s.Close() })
	for _, c := range []struct {
		h    http.Handler
		host string
		want int
	}{
		{Handler(s), "evil.example", http.StatusMisdirectedRequest},
		{Handler(s), "evil.example:8080", http.StatusMisdirectedRequest},
		{Handler(s), "127.0.0.1:6060", http.StatusOK},
		{Handler(s), "[::1]:6060", http.StatusOK},
		{Handler(s), "localhost:6060", http.StatusOK},
		{HandlerWith(s, LivePageOptions{AllowedHosts: []string{"admin.internal"}}), "Admin.Internal:6060", http.StatusOK},
		{HandlerWith(s, LivePageOptions{AllowedHosts: []string{"admin.internal"}}), "evil.example", http.StatusMisdirectedRequest},
	} {
		r := httptest.NewRequest(http.MethodGet, "/json", nil)
		r.Host = c.host
		w := httptest.NewRecorder()
		c.h.ServeHTTP(w, r)
		if w.Code != c.want {
			t.Errorf("Host %s: %d, want %d", c.host, w.Code, c.want)
		}
	}
}
