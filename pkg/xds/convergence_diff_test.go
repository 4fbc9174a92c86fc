package xds

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/meshpilot/meshpilot/internal/xdstest"
)

// Bounds of a mismatch report: enough to see what differs, short enough to
// read in a test log.
const (
	maxDiffEntries = 8
	maxDiffLines   = 30
)

// snapshotDiff describes how a long-lived client's active configuration
// differs from a fresh client's, type by type: the names only one of them
// holds, and for each name both hold with other contents, a diff of the
// two. It is "" when they are the same.
func snapshotDiff(long, fresh xdstest.Snapshot) string {
	var entries []string
	entries = append(entries, diffByName("Cluster", long.Clusters, fresh.Clusters)...)
	entries = append(entries, diffByName("ClusterLoadAssignment", long.Endpoints, fresh.Endpoints)...)
	entries = append(entries, diffByName("Listener", long.Listeners, fresh.Listeners)...)
	entries = append(entries, diffByName("RouteConfiguration", long.Routes, fresh.Routes)...)
	entries = append(entries, diffByName("Secret", long.Secrets, fresh.Secrets)...)
	for _, typeURL := range slices.Sorted(maps.Keys(fresh.Workload)) {
		entries = append(entries, diffByName(shortTypeName(typeURL), long.Workload[typeURL], fresh.Workload[typeURL])...)
	}
	if len(entries) > maxDiffEntries {
		entries = append(entries[:maxDiffEntries], fmt.Sprintf("... and %d more differences", len(entries)-maxDiffEntries))
	}
	return strings.Join(entries, "\n")
}

// sameSnapshot is snapshotDiff(a, b) == "", for polling: it allocates
// nothing and stops at the first difference.
func sameSnapshot(a, b xdstest.Snapshot) bool {
	if len(a.Workload) != len(b.Workload) {
		return false
	}
	for typeURL, held := range a.Workload {
		if !sameByName(held, b.Workload[typeURL]) {
			return false
		}
	}
	return sameByName(a.Clusters, b.Clusters) && sameByName(a.Endpoints, b.Endpoints) &&
		sameByName(a.Listeners, b.Listeners) && sameByName(a.Routes, b.Routes) && sameByName(a.Secrets, b.Secrets)
}

// shortTypeName is the message name of a type URL, "Address" for
// type.googleapis.com/istio.workload.Address.
func shortTypeName(typeURL string) string {
	return typeURL[strings.LastIndex(typeURL, ".")+1:]
}

func sameByName[M proto.Message](a, b map[string]M) bool {
	if len(a) != len(b) {
		return false
	}
	for name, m := range a {
		o, ok := b[name]
		if !ok || !proto.Equal(m, o) {
			return false
		}
	}
	return true
}

func diffByName[M proto.Message](kind string, long, fresh map[string]M) []string {
	names := slices.Sorted(maps.Keys(long))
	for name := range fresh {
		if _, ok := long[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var out []string
	for _, name := range names {
		l, inLong := long[name]
		f, inFresh := fresh[name]
		switch {
		case !inFresh:
			out = append(out, fmt.Sprintf("%s %s: only the long-lived client has it", kind, name))
		case !inLong:
			out = append(out, fmt.Sprintf("%s %s: only the fresh client has it", kind, name))
		case !proto.Equal(l, f):
			out = append(out, fmt.Sprintf("%s %s differs (-long-lived +fresh):\n%s", kind, name,
				clipLines(cmp.Diff(l, f, protocmp.Transform()), maxDiffLines)))
		}
	}
	return out
}

func clipLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) <= n {
		return strings.Join(lines, "\n")
	}
	return strings.Join(lines[:n], "\n") + fmt.Sprintf("\n... %d more lines", len(lines)-n)
}
