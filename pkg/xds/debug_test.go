package xds

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

func getJSON(t *testing.T, srv *httptest.Server, path string, wantStatus int, into any) string {
	t.Helper()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != wantStatus {
		t.Fatalf("GET %s: status %d (%s), want %d", path, resp.StatusCode, body, wantStatus)
	}
	if into != nil {
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Fatalf("GET %s: content type %q", path, ct)
		}
		if err := json.Unmarshal(body, into); err != nil {
			t.Fatalf("GET %s: %v\n%s", path, err, body)
		}
	}
	return string(body)
}

func TestDebugEndpoints(t *testing.T) {
	h := newHarness(t, harnessConfig{seed: seedAB})
	c := h.sotw("client")
	cds := c.subscribe(ClusterType)
	c.ack(cds)
	eds := c.subscribe(EndpointType, hostname("a"))
	nack(c, eds, "", "bad endpoints", hostname("a"))
	c.expectQuiet("before reading debug state")

	srv := httptest.NewServer(h.server.DebugHandler())
	defer srv.Close()

	t.Run("syncz", func(t *testing.T) {
		// Istio's field names, and meshpilot's own beside them.
		var syncz []struct {
			ProxyID       string `json:"proxy"`
			ProxyType     string `json:"proxy_type"`
			ClusterSent   string `json:"cluster_sent"`
			ClusterAcked  string `json:"cluster_acked"`
			EndpointSent  string `json:"endpoint_sent"`
			EndpointAcked string `json:"endpoint_acked"`
			ListenerSent  string `json:"listener_sent"`
			Resources     map[string]struct {
				Sent      string `json:"sent"`
				Acked     string `json:"acked"`
				LastError string `json:"lastError"`
			} `json:"resources"`
			Namespace string `json:"namespace"`
			Mode      string `json:"mode"`
			Types     []struct {
				Type         string `json:"type"`
				SentVersion  string `json:"sentVersion"`
				AckedVersion string `json:"ackedVersion"`
				Nack         *struct {
					Nonce string `json:"nonce"`
					Error string `json:"error"`
				} `json:"nack"`
				Subscribed int `json:"subscribedNames"`
				Resources  int `json:"resourcesSent"`
			} `json:"types"`
		}
		getJSON(t, srv, "/debug/syncz", http.StatusOK, &syncz)
		if len(syncz) != 1 || syncz[0].ProxyID != proxyID("client") || syncz[0].Mode != "sotw" ||
			syncz[0].ProxyType != "sidecar" || syncz[0].Namespace != "default" {
			t.Fatalf("syncz = %+v, want one sotw entry for the client", syncz)
		}
		got := syncz[0]
		if got.ClusterSent != cds.GetNonce() || got.ClusterAcked != cds.GetNonce() ||
			got.EndpointSent != eds.GetNonce() || got.EndpointAcked != "" || got.ListenerSent != "" {
			t.Fatalf("istio fields = %+v, want CDS sent and acked at nonce %s, EDS sent at %s and not acked",
				got, cds.GetNonce(), eds.GetNonce())
		}
		if r := got.Resources[EndpointType]; r.Sent != eds.GetNonce() || r.Acked != "" || r.LastError != "bad endpoints" {
			t.Fatalf("resources[eds] = %+v, want the NACK's message", r)
		}
		if r := got.Resources[ClusterType]; r.Sent != cds.GetNonce() || r.Acked != cds.GetNonce() || r.LastError != "" {
			t.Fatalf("resources[cds] = %+v", r)
		}
		byType := map[string]int{}
		for i, ts := range got.Types {
			byType[ts.Type] = i
		}
		cdsStatus, edsStatus := got.Types[byType["cds"]], got.Types[byType["eds"]]
		if cdsStatus.AckedVersion != cds.GetVersionInfo() || cdsStatus.SentVersion != cds.GetVersionInfo() ||
			cdsStatus.Nack != nil || cdsStatus.Resources != 2 {
			t.Fatalf("cds status = %+v", cdsStatus)
		}
		if edsStatus.Nack == nil || edsStatus.Nack.Error != "bad endpoints" || edsStatus.Nack.Nonce != eds.GetNonce() ||
			edsStatus.AckedVersion != "" || edsStatus.Subscribed != 1 {
			t.Fatalf("eds status = %+v", edsStatus)
		}
	})

	t.Run("config_dump, Envoy's shape", func(t *testing.T) {
		for _, tc := range []struct {
			query     string
			wantTypes []string
		}{
			{"", []string{"type.googleapis.com/envoy.admin.v3.ClustersConfigDump"}},
			{"&include_eds=true", []string{"type.googleapis.com/envoy.admin.v3.ClustersConfigDump", "type.googleapis.com/envoy.admin.v3.EndpointsConfigDump"}},
		} {
			body := getJSON(t, srv, "/debug/config_dump?proxyID="+url.QueryEscape(proxyID("client"))+tc.query, http.StatusOK, nil)
			dump := &adminv3.ConfigDump{}
			if err := protojson.Unmarshal([]byte(body), dump); err != nil {
				t.Fatalf("%s: not an Envoy ConfigDump: %v\n%s", tc.query, err, body)
			}
			var types []string
			for _, c := range dump.GetConfigs() {
				types = append(types, c.GetTypeUrl())
			}
			if !slices.Equal(types, tc.wantTypes) {
				t.Fatalf("%s: configs %v, want %v", tc.query, types, tc.wantTypes)
			}
			clusters := &adminv3.ClustersConfigDump{}
			if err := dump.GetConfigs()[0].UnmarshalTo(clusters); err != nil {
				t.Fatal(err)
			}
			if clusters.GetVersionInfo() != cds.GetVersionInfo() || len(clusters.GetDynamicActiveClusters()) != 2 {
				t.Fatalf("clusters dump = %v, want version %s and 2 clusters", clusters, cds.GetVersionInfo())
			}
			for i, want := range []string{hostname("a"), hostname("b")} {
				dc := clusters.GetDynamicActiveClusters()[i]
				c := &clusterv3.Cluster{}
				if err := dc.GetCluster().UnmarshalTo(c); err != nil {
					t.Fatal(err)
				}
				if c.GetName() != want || c.GetType() != clusterv3.Cluster_EDS || dc.GetVersionInfo() == "" || dc.GetLastUpdated() == nil {
					t.Fatalf("cluster %d = %v, want EDS cluster %s with a version and time", i, dc, want)
				}
			}
			if len(tc.wantTypes) == 2 {
				// What was last sent includes the rejected EDS response.
				eps := &adminv3.EndpointsConfigDump{}
				if err := dump.GetConfigs()[1].UnmarshalTo(eps); err != nil {
					t.Fatal(err)
				}
				cla := &endpointv3.ClusterLoadAssignment{}
				if len(eps.GetDynamicEndpointConfigs()) != 1 {
					t.Fatalf("endpoints dump = %v, want one assignment", eps)
				}
				if err := eps.GetDynamicEndpointConfigs()[0].GetEndpointConfig().UnmarshalTo(cla); err != nil || cla.GetClusterName() != hostname("a") {
					t.Fatalf("endpoints dump = %v (%v), want %s", eps, err, hostname("a"))
				}
			}
		}
	})

	t.Run("config_dump, meshpilot's shape", func(t *testing.T) {
		var dump struct {
			ProxyID string `json:"proxyID"`
			Types   []struct {
				TypeURL   string `json:"typeURL"`
				Version   string `json:"version"`
				Nonce     string `json:"nonce"`
				Resources []struct {
					Name     string         `json:"name"`
					Version  string         `json:"version"`
					Resource map[string]any `json:"resource"`
				} `json:"resources"`
			} `json:"types"`
		}
		getJSON(t, srv, "/debug/config_dump?format=meshpilot&proxyID="+url.QueryEscape(proxyID("client")), http.StatusOK, &dump)
		if dump.ProxyID != proxyID("client") || len(dump.Types) != 3 {
			t.Fatalf("dump = %+v, want cds, eds and the probe type", dump)
		}
		got := dump.Types[0] // clusters come first
		if got.TypeURL != ClusterType || got.Version != cds.GetVersionInfo() || got.Nonce != cds.GetNonce() || len(got.Resources) != 2 {
			t.Fatalf("cds dump = %+v", got)
		}
		for i, want := range []string{hostname("a"), hostname("b")} {
			r := got.Resources[i]
			if r.Name != want || r.Version == "" || r.Resource["@type"] != ClusterType || r.Resource["name"] != want ||
				r.Resource["type"] != "EDS" {
				t.Fatalf("cds resource %d = %+v, want cluster %s rendered as protojson", i, r, want)
			}
		}
		if eds := dump.Types[1]; eds.TypeURL != EndpointType || len(eds.Resources) != 1 ||
			eds.Resources[0].Resource["clusterName"] != hostname("a") {
			t.Fatalf("eds dump = %+v", eds)
		}
	})

	t.Run("config_dump with an unknown format", func(t *testing.T) {
		getJSON(t, srv, "/debug/config_dump?format=yaml&proxyID="+url.QueryEscape(proxyID("client")), http.StatusBadRequest, nil)
	})

	t.Run("config_dump of an unknown proxy", func(t *testing.T) {
		body := getJSON(t, srv, "/debug/config_dump?proxyID=sidecar~1.2.3.4~nobody.default~default.svc.cluster.local", http.StatusNotFound, nil)
		if !strings.Contains(body, "is not connected") {
			t.Fatalf("404 body %q does not say why", body)
		}
		getJSON(t, srv, "/debug/config_dump", http.StatusBadRequest, nil)
	})

	t.Run("pushcontext", func(t *testing.T) {
		// What the harness's world holds, written out: services a and b,
		// one endpoint each, no DestinationRule, no Ingress.
		var summary struct {
			Version string `json:"version"`
			Counts  struct {
				Services, Endpoints, DestinationRules, MergedDestinationRules int
			} `json:"counts"`
			DestinationRules []any `json:"destinationRules"`
			Ingress          struct {
				Owned int `json:"owned"`
			} `json:"ingress"`
		}
		getJSON(t, srv, "/debug/pushcontext", http.StatusOK, &summary)
		if summary.Version == "" || summary.Version != h.server.PushContext().Version() {
			t.Errorf("version %q, want the served push context's %q", summary.Version, h.server.PushContext().Version())
		}
		c := summary.Counts
		if c.Services != 2 || c.Endpoints != 2 || c.DestinationRules != 0 || c.MergedDestinationRules != 0 {
			t.Errorf("counts %+v, want 2 services, 2 endpoints, no rules", c)
		}
		if len(summary.DestinationRules) != 0 || summary.Ingress.Owned != 0 {
			t.Errorf("rules %v, owned Ingresses %d; want none", summary.DestinationRules, summary.Ingress.Owned)
		}
	})
}

func TestDebugPushContextBeforeStart(t *testing.T) {
	h := newHarness(t, harnessConfig{manualStart: true})
	srv := httptest.NewServer(h.server.DebugHandler())
	defer srv.Close()
	getJSON(t, srv, "/debug/pushcontext", http.StatusServiceUnavailable, nil)
	var syncz []any
	getJSON(t, srv, "/debug/syncz", http.StatusOK, &syncz)
	if len(syncz) != 0 {
		t.Fatalf("syncz = %v, want empty", syncz)
	}
}
