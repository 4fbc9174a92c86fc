package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/klog/v2"
)

// client-go reports through klog; with --log-format json its lines must be
// JSON objects like every other line, or log pipelines choke on them.
func TestKlogGoesThroughTheJSONLogger(t *testing.T) {
	var out bytes.Buffer
	if _, err := newLogger("info", "json", &out); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(klog.ClearLogger)

	klog.InfoS("watch restarted", "resource", "services")
	klog.Errorf("list failed: %s", "forbidden")
	klog.V(4).InfoS("below the level")
	klog.Flush()

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines (the V(4) one filtered out), got %d:\n%s", len(lines), out.String())
	}
	want := []map[string]string{
		{"level": "INFO", "msg": "watch restarted", "resource": "services"},
		{"level": "ERROR", "msg": "list failed: forbidden"},
	}
	for i, line := range lines {
		var got map[string]any
		if err := json.Unmarshal([]byte(line), &got); err != nil {
			t.Fatalf("line %d is not a JSON object: %v\n%s", i, err, line)
		}
		for k, v := range want[i] {
			if got[k] != v {
				t.Errorf("line %d: %s = %v, want %q\n%s", i, k, got[k], v, line)
			}
		}
	}
}

func TestNewLoggerRejectsUnknownSettings(t *testing.T) {
	for _, tc := range []struct{ level, format, want string }{
		{"loud", "text", "--log-level"},
		{"info", "xml", "--log-format"},
	} {
		if _, err := newLogger(tc.level, tc.format, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("newLogger(%q, %q) = %v, want an error naming %s", tc.level, tc.format, err, tc.want)
		}
	}
}
