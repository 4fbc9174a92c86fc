package membership

import "testing"

// TestAmbient: a Pod with an injected sidecar is never captured, even in
// an ambient namespace: its sidecar redirects its traffic already, and a
// second capture in front of it would send that traffic through both
// proxies, or back and forth between them.
func TestAmbient(t *testing.T) {
	ambient := map[string]string{DataplaneModeLabel: ModeAmbient}
	none := map[string]string{DataplaneModeLabel: ModeNone}
	injected := map[string]string{SidecarStatusAnnotation: `{"containers":["istio-proxy"]}`}
	for _, tc := range []struct {
		name                               string
		namespaceLabels, labels, annotated map[string]string
		want                               bool
	}{
		{"namespace ambient", ambient, nil, nil, true},
		{"pod ambient", nil, ambient, nil, true},
		{"pod opted out", ambient, none, nil, false},
		{"neither", nil, nil, nil, false},
		{"namespace ambient, sidecar injected", ambient, nil, injected, false},
		{"pod ambient, sidecar injected", nil, ambient, injected, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Ambient(tc.labels, tc.annotated, tc.namespaceLabels); got != tc.want {
				t.Errorf("Ambient = %v, want %v", got, tc.want)
			}
		})
	}
}
