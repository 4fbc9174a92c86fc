package grpcgen

import "testing"

func TestParseClusterName(t *testing.T) {
	tests := []struct {
		name string
		want clusterKey
		ok   bool
	}{
		{"outbound|7070||echo.default.svc.cluster.local", clusterKey{"echo.default.svc.cluster.local", 7070, ""}, true},
		{"outbound|7070|v1|echo.default.svc.cluster.local", clusterKey{"echo.default.svc.cluster.local", 7070, "v1"}, true},
		{"inbound|7070||echo.default.svc.cluster.local", clusterKey{}, false},
		{"outbound|0||echo", clusterKey{}, false},
		{"outbound|70000||echo", clusterKey{}, false},
		{"outbound|x||echo", clusterKey{}, false},
		{"outbound|7070||", clusterKey{}, false},
		{"outbound|7070|echo", clusterKey{}, false},
		{"outbound|7070|a|b|c", clusterKey{}, false},
		{"echo.default.svc.cluster.local:7070", clusterKey{}, false},
	}
	for _, tt := range tests {
		got, ok := parseClusterName(tt.name)
		if ok != tt.ok || got != tt.want {
			t.Errorf("parseClusterName(%q) = %+v, %v; want %+v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
		if ok && got.name() != tt.name {
			t.Errorf("round trip of %q gave %q", tt.name, got.name())
		}
	}
}

func TestExpandShortName(t *testing.T) {
	tests := []struct{ host, ns, want string }{
		{"echo", "default", "echo.default.svc.cluster.local"},
		{"echo", "", ""},
		{"echo.apps", "default", "echo.apps.svc.cluster.local"},
		{"echo.apps.svc", "default", "echo.apps.svc.cluster.local"},
		{"echo.apps.other", "default", ""},
		{"echo.apps.svc.cluster.local", "default", ""},
	}
	for _, tt := range tests {
		if got := expandShortName(tt.host, tt.ns, "cluster.local"); got != tt.want {
			t.Errorf("expandShortName(%q, %q) = %q, want %q", tt.host, tt.ns, got, tt.want)
		}
	}
}
