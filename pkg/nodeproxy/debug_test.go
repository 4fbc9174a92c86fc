package nodeproxy

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestDebugOnlyFromLoopback: the debug pages answer a port-forward (which
// arrives on loopback) and refuse every other pod of the cluster, which can
// reach the port because Prometheus scrapes /metrics on it.
func TestDebugOnlyFromLoopback(t *testing.T) {
	cases := []struct {
		remote string
		want   int
	}{
		{"127.0.0.1:40000", http.StatusOK},
		{"[::1]:40000", http.StatusOK},
		{"[::ffff:127.0.0.1]:40000", http.StatusOK},
		{"10.244.1.7:40000", http.StatusForbidden},
		{"[fd00::7]:40000", http.StatusForbidden},
		{"garbage", http.StatusForbidden},
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("{}\n")) })
	for _, tc := range cases {
		t.Run(tc.remote, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "/debug/tunnels", nil)
			req.RemoteAddr = tc.remote
			rec := httptest.NewRecorder()
			loopbackOnly(ok).ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Fatalf("GET from %s: %d (%s), want %d", tc.remote, rec.Code, rec.Body, tc.want)
			}
		})
	}
}
