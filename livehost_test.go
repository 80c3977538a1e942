package sqlflight

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestLivePageHost: Handler answers loopback and refuses a Host it was not
// told of (DNS rebinding), and HandlerWith hands LivePageOptions.AllowedHosts
// to the page (internal/livepage checks the hosts themselves).
func TestLivePageHost(t *testing.T) {
	s := New()
	t.Cleanup(func() { _ = s.Close() })
	for _, c := range []struct {
		h    http.Handler
		host string
		want int
	}{
		{Handler(s), "evil.example", http.StatusMisdirectedRequest},
		{Handler(s), "127.0.0.1:6060", http.StatusOK},
		{Handler(s), "admin.internal", http.StatusMisdirectedRequest},
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
