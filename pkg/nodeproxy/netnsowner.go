package nodeproxy

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/meshpilot/meshpilot/pkg/netns"
)

// podCgroup finds a pod's UID in a cgroup path: the kubelet names a pod's
// cgroup pod<uid> with the cgroupfs driver, and kubepods-<qos>-pod<uid>.slice,
// dashes turned to underscores, with the systemd driver.
var podCgroup = regexp.MustCompile(`pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})`)

// podUIDsInCgroups returns the pod UIDs that the lines of a
// /proc/<pid>/cgroup file name.
func podUIDsInCgroups(cgroups string) []string {
	var out []string
	for _, m := range podCgroup.FindAllStringSubmatch(cgroups, -1) {
		uid := strings.ReplaceAll(m[1], "_", "-")
		if len(out) == 0 || out[len(out)-1] != uid {
			out = append(out, uid)
		}
	}
	return out
}

// namespaceOwners returns the UIDs of the pods whose processes run in ns,
// from their cgroups, as istio-cni finds a pod's namespace. Only the
// processes the scan found in ns are asked, so that enrolling a namespace
// of pods walks /proc once and not once per pod; their cgroups are read
// now. One that has ended since, or whose PID a process in another
// namespace has been given, is passed over. Empty when no process there
// names a pod (a namespace with no process of its own, or processes the
// kubelet did not start).
func namespaceOwners(ns scannedNetns) map[string]bool {
	owners := map[string]bool{}
	for _, proc := range ns.procs {
		if id, err := netns.IDOf(proc + "/ns/net"); err != nil || id != ns.id {
			continue
		}
		cgroups, err := os.ReadFile(proc + "/cgroup")
		if err != nil {
			continue
		}
		for _, uid := range podUIDsInCgroups(string(cgroups)) {
			owners[uid] = true
		}
	}
	return owners
}

// checkOwner refuses a namespace that holds a pod's addresses but whose
// processes belong to another pod: a Pod's status can name addresses its
// sandbox no longer has (after a node restarts, before its new sandbox is
// up), which another pod's sandbox may have been given since.
//
// The processes asked are those the scan found in the namespace it named
// by path; should path name another namespace by now (a pinned name given
// to a new one, or a PID to a new process), they tell nothing about it,
// and it is refused so that the retry scans again.
func checkOwner(ns scannedNetns, uid string) error {
	if id, err := netns.IDOf(ns.path); err != nil || id != ns.id {
		return fmt.Errorf("%w: %s is not the namespace the scan found there", errNetnsNotFound, ns.path)
	}
	owners := namespaceOwners(ns)
	if len(owners) == 0 || owners[uid] {
		return nil
	}
	names := make([]string, 0, len(owners))
	for o := range owners {
		names = append(names, o)
	}
	slices.Sort(names)
	return fmt.Errorf("%w: %s holds its addresses, but its processes are pod %s's", errNetnsNotFound, ns.path, strings.Join(names, ", "))
}
