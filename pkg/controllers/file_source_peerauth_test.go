package controllers

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apisecurity "istio.io/api/security/v1beta1"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// paModes summarizes the stored PeerAuthentications as
// "ns/name=MODE[ port:MODE...]".
func paModes(store model.Store) []string {
	var out []string
	for _, c := range store.Configs(model.KindPeerAuthentication) {
		spec := c.Spec.(*apisecurity.PeerAuthentication)
		s := c.Namespace + "/" + c.Name + "=" + spec.GetMtls().GetMode().String()
		for _, port := range slices.Sorted(maps.Keys(spec.GetPortLevelMtls())) {
			s += fmt.Sprintf(" %d:%s", port, spec.GetPortLevelMtls()[port].GetMode())
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

const drForPeerAuthTests = "apiVersion: networking.istio.io/v1\nkind: DestinationRule\n" +
	"metadata: {name: reviews, namespace: ns}\nspec: {host: reviews}\n"

func TestFileSourcePeerAuthentications(t *testing.T) {
	cases := []struct {
		name string
		docs []string
		// want is paModes of the store; the DestinationRule beside them
		// must always load.
		want []string
		// wantErrors counts rejected PeerAuthentications by reason.
		wantErrors map[string]float64
		wantLog    []string
	}{
		{
			name: "mesh, namespace and workload levels, v1 and v1beta1",
			docs: []string{
				"apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: default, namespace: istio-system}\nspec: {mtls: {mode: STRICT}}\n",
				"apiVersion: security.istio.io/v1beta1\nkind: PeerAuthentication\nmetadata: {name: ns-wide, namespace: ns}\nspec: {mtls: {mode: PERMISSIVE}}\n",
				"apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: reviews, namespace: ns}\n" +
					"spec: {selector: {matchLabels: {app: reviews}}, mtls: {mode: UNSET}, portLevelMtls: {\"9080\": {mode: DISABLE}}}\n",
			},
			want: []string{"istio-system/default=STRICT", "ns/ns-wide=PERMISSIVE", "ns/reviews=UNSET 9080:DISABLE"},
		},
		{
			name: "no namespace means default; empty spec is valid",
			docs: []string{"apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: bare}\nspec: {}\n"},
			want: []string{"default/bare=UNSET"},
		},
		{
			name: "invalid policies are skipped, the valid ones load",
			docs: []string{
				"apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: ok, namespace: ns}\nspec: {mtls: {mode: STRICT}}\n",
				// Port-level mTLS without a selector, and a port out of range.
				"apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: portwide, namespace: ns}\n" +
					"spec: {portLevelMtls: {\"0\": {mode: STRICT}}}\n",
				// A wildcard in a selector.
				"apiVersion: security.istio.io/v1beta1\nkind: PeerAuthentication\nmetadata: {name: wild, namespace: ns}\n" +
					"spec: {selector: {matchLabels: {app: \"rev*\"}}}\n",
			},
			want:       []string{"ns/ok=STRICT"},
			wantErrors: map[string]float64{ReasonInvalid: 2},
			wantLog: []string{"name=portwide", "spec.portLevelMtls: needs a selector", "spec.portLevelMtls[0]: port number",
				"name=wild", `value of \"app\": wildcards are not supported`},
		},
		{
			name: "an unknown mode name does not decode",
			docs: []string{
				"apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: typo, namespace: ns}\nspec: {mtls: {mode: STRICTER}}\n",
			},
			wantErrors: map[string]float64{ReasonDecode: 1},
			wantLog:    []string{"STRICTER"},
		},
		{
			name: "an unknown mode number is invalid",
			docs: []string{
				"apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: seven, namespace: ns}\nspec: {mtls: {mode: 7}}\n",
			},
			wantErrors: map[string]float64{ReasonInvalid: 1},
			wantLog:    []string{"spec.mtls.mode: unknown mode 7"},
		},
		{
			name: "the same policy twice, across versions",
			docs: []string{
				"apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: twice, namespace: ns}\nspec: {mtls: {mode: STRICT}}\n",
				"apiVersion: security.istio.io/v1beta1\nkind: PeerAuthentication\nmetadata: {name: twice, namespace: ns}\nspec: {mtls: {mode: DISABLE}}\n",
			},
			want:       []string{"ns/twice=STRICT"},
			wantErrors: map[string]float64{ReasonDuplicate: 1},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "dr.yaml", drForPeerAuthTests)
			writeFile(t, dir, "peerauth.yaml", strings.Join(tc.docs, "---\n"))
			h := startFileSource(t, dir)

			if diff := cmp.Diff(tc.want, paModes(h.store)); diff != "" {
				t.Errorf("PeerAuthentications (-want +got)\n%s\nlogs:\n%s", diff, h.logs)
			}
			if diff := cmp.Diff([]string{"ns/reviews=reviews"}, drHosts(h.store)); diff != "" {
				t.Errorf("destination rules (-want +got)\n%s", diff)
			}
			h.checkReported(t, "PeerAuthentication", tc.wantErrors, tc.wantLog)
		})
	}
}

// TestFileSourcePeerAuthenticationChanges edits a policy file: an edit
// that breaks the policy withdraws it, fixing it restores it, and removing
// the file deletes it, without touching the DestinationRule beside it.
func TestFileSourcePeerAuthenticationChanges(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "dr.yaml", drForPeerAuthTests)
	policy := func(spec string) string {
		return "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: reviews, namespace: ns}\nspec: " + spec + "\n"
	}
	writeFile(t, dir, "pa.yaml", policy("{mtls: {mode: STRICT}}"))
	h := startFileSource(t, dir)
	if diff := cmp.Diff([]string{"ns/reviews=STRICT"}, paModes(h.store)); diff != "" {
		t.Fatalf("initial (-want +got)\n%s", diff)
	}

	writeFile(t, dir, "pa.yaml", policy(`{selector: {matchLabels: {app: reviews}}, portLevelMtls: {"8080": {mode: DISABLE}}}`))
	eventually(t, "edit applied", func() bool { return slices.Equal(paModes(h.store), []string{"ns/reviews=UNSET 8080:DISABLE"}) })

	writeFile(t, dir, "pa.yaml", policy(`{portLevelMtls: {"8080": {mode: DISABLE}}}`))
	eventually(t, "broken edit withdraws the policy", func() bool {
		return len(paModes(h.store)) == 0 && h.errorCount("PeerAuthentication", ReasonInvalid) == 1
	})

	writeFile(t, dir, "pa.yaml", policy("{mtls: {mode: DISABLE}}"))
	eventually(t, "fixed policy restored", func() bool { return slices.Equal(paModes(h.store), []string{"ns/reviews=DISABLE"}) })

	if err := os.Remove(filepath.Join(dir, "pa.yaml")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "file removed", func() bool { return len(paModes(h.store)) == 0 })
	if diff := cmp.Diff([]string{"ns/reviews=reviews"}, drHosts(h.store)); diff != "" {
		t.Errorf("destination rules (-want +got)\n%s", diff)
	}
}
