package xds

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// A client that rejects every response must not turn the server into a
// resend loop: each rejection is answered by silence until the config
// changes, the rejection shows in the metrics and in /debug/syncz, and the
// other clients go on converging as if nothing happened.
func TestNackStormIsNotAResendLoop(t *testing.T) {
	const changes = 6
	h := newHarness(t, harnessConfig{seed: seedAB})

	healthy := make([]*sotwClient, 3)
	for i := range healthy {
		healthy[i] = h.sotw(fmt.Sprintf("healthy-%d", i))
		healthy[i].ack(healthy[i].subscribe(ClusterType))
	}

	storm := h.sotw("storm")
	rejected := 0
	reject := func(r *discoveryv3.DiscoveryResponse) {
		t.Helper()
		rejected++
		nack(storm, r, "", fmt.Sprintf("rejection %d: cluster is unacceptable", rejected))
	}
	cds := storm.subscribe(ClusterType)
	reject(cds)
	storm.expectQuiet("after the first NACK")

	for i := range changes {
		// A push that changes nothing for CDS (the same clusters again) is
		// withheld: the client has just rejected exactly that content.
		// Identical proxies share one generation, so count them all.
		before := h.gens.total(ClusterType)
		h.pushNow(&model.PushRequest{Full: true, Start: time.Now()})
		storm.expectQuiet(fmt.Sprintf("change %d: a push with the rejected content", i))
		if h.gens.total(ClusterType) == before {
			t.Fatalf("change %d: the full push regenerated no CDS: the quiet above proves nothing", i)
		}

		// A real change is sent once, rejected again, and not resent.
		addService(h.store, fmt.Sprintf("svc-%d", i), "10.2.0.1")
		cds = storm.expect(ClusterType)
		if got, want := len(cds.GetResources()), 3+i; got != want {
			t.Fatalf("change %d: the rejecting client got %d clusters, want %d", i, got, want)
		}
		reject(cds)
		storm.expectQuiet(fmt.Sprintf("change %d: after the NACK", i))
	}

	// The others converge on the final config, whatever the storm did.
	want := []string{hostname("a"), hostname("b")}
	for i := range changes {
		want = append(want, hostname(fmt.Sprintf("svc-%d", i)))
	}
	slices.Sort(want)
	for _, c := range healthy {
		for {
			r := c.expect(ClusterType)
			c.ack(r)
			if slices.Equal(names(r.GetResources(), resourceName), want) {
				break
			}
		}
	}

	// Every rejection is counted once, in istiod's metric and in ours.
	if got := value(t, h.reg, "pilot_total_xds_rejects", "type", "cds"); got != float64(rejected) {
		t.Errorf("pilot_total_xds_rejects{type=cds} = %v, want %d", got, rejected)
	}
	if got := h.counter(h.server.metrics.nacks, "cds"); got != float64(rejected) {
		t.Errorf("meshpilot_xds_nacks_total{type=cds} = %v, want %d", got, rejected)
	}

	// /debug/syncz names the last rejection, and the healthy clients' ACKs.
	srv := httptest.NewServer(h.server.DebugHandler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/debug/syncz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var syncz []struct {
		ProxyID string `json:"proxy"`
		Types   []struct {
			Type         string `json:"type"`
			AckedVersion string `json:"ackedVersion"`
			Nack         *struct {
				Nonce string `json:"nonce"`
				Error string `json:"error"`
			} `json:"nack"`
		} `json:"types"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&syncz); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, p := range syncz {
		for _, ty := range p.Types {
			if ty.Type != "cds" {
				continue
			}
			seen++
			if p.ProxyID == proxyID("storm") {
				wantErr := fmt.Sprintf("rejection %d: cluster is unacceptable", rejected)
				if ty.Nack == nil || ty.Nack.Nonce != cds.GetNonce() || ty.Nack.Error != wantErr {
					t.Errorf("syncz of the rejecting client: nack = %+v, want nonce %s and %q", ty.Nack, cds.GetNonce(), wantErr)
				}
				if ty.AckedVersion != "" {
					t.Errorf("syncz of the rejecting client shows an ACK (%s) it never sent", ty.AckedVersion)
				}
				continue
			}
			if ty.Nack != nil || ty.AckedVersion == "" {
				t.Errorf("syncz of %s: nack = %+v, acked %q; want no NACK and an ACK", p.ProxyID, ty.Nack, ty.AckedVersion)
			}
		}
	}
	if seen != len(healthy)+1 {
		t.Errorf("syncz lists CDS for %d clients, want %d", seen, len(healthy)+1)
	}
}

// total counts the generations of typeURL for every proxy.
func (f *fakeGenerators) total(typeURL string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for key, calls := range f.calls {
		if strings.HasSuffix(key, "|"+shortType(typeURL)) {
			n += calls
		}
	}
	return n
}
