package nodeproxy

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
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

// namespaceOwners returns the UIDs of the pods whose processes run in the
// network namespace at path, from their cgroups, as istio-cni finds a
// pod's namespace. Empty when no process there names a pod (a namespace
// with no process of its own, or processes the kubelet did not start).
func namespaceOwners(path string) map[string]bool {
	id, err := netns.IDOf(path)
	if err != nil {
		return nil
	}
	owners := map[string]bool{}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, proc := range procs {
		if pid, err := netns.IDOf(proc + "/ns/net"); err != nil || pid != id {
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
func checkOwner(path, uid string) error {
	owners := namespaceOwners(path)
	if len(owners) == 0 || owners[uid] {
		return nil
	}
	names := make([]string, 0, len(owners))
	for o := range owners {
		names = append(names, o)
	}
	return fmt.Errorf("%w: %s holds its addresses, but its processes are pod %s's", errNetnsNotFound, path, strings.Join(names, ", "))
}
