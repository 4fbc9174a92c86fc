package nodeproxy

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/netnstest"
	"github.com/meshpilot/meshpilot/pkg/netns"
)

// TestNamespacePathsKeepTheSandboxProcess builds a pod's namespace as a
// runtime that pins none does: a sandbox process creates it and an
// application's process joins it later. The path kept for it must be the
// sandbox's, which lives as long as the namespace is the pod's, whatever
// order /proc lists them in; a pinned path wins over both. Either way the
// namespace comes with both processes, which the owner check reads.
func TestNamespacePathsKeepTheSandboxProcess(t *testing.T) {
	netnstest.RequireRoot(t)
	sandbox := start(t, "unshare", "--net", "sleep", "300")
	sandboxPath := fmt.Sprintf("/proc/%d/ns/net", sandbox.Pid)
	self, err := netns.IDOf("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	podNS := waitForNamespace(t, sandboxPath, func(id netns.ID) bool { return id != self })
	// Start times are in clock ticks (10 ms): the application must start
	// a tick or more later to be younger.
	time.Sleep(30 * time.Millisecond)
	app := start(t, "nsenter", fmt.Sprintf("--net=%s", sandboxPath), "sleep", "300")
	appPath := fmt.Sprintf("/proc/%d/ns/net", app.Pid)
	waitForNamespace(t, appPath, func(id netns.ID) bool { return id == podNS })

	pinned := "/var/run/netns/meshpilot-test-" + fmt.Sprint(os.Getpid())
	if out, err := exec.Command("ip", "netns", "attach", "meshpilot-test-"+fmt.Sprint(os.Getpid()), fmt.Sprint(sandbox.Pid)).CombinedOutput(); err != nil {
		t.Fatalf("ip netns attach: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", "meshpilot-test-"+fmt.Sprint(os.Getpid())).Run() })

	sandboxProc, appProc := fmt.Sprintf("/proc/%d", sandbox.Pid), fmt.Sprintf("/proc/%d", app.Pid)
	for _, tc := range []struct {
		name          string
		skip          netns.ID
		pinned, procs []string
		want          []string
		wantProcs     []string // of the one namespace found
	}{
		{"the application listed first", self, nil, []string{appPath, sandboxPath}, []string{sandboxPath}, []string{appProc, sandboxProc}},
		{"the sandbox listed first", self, nil, []string{sandboxPath, appPath}, []string{sandboxPath}, []string{sandboxProc, appProc}},
		{"a pinned path wins", self, []string{pinned}, []string{appPath, sandboxPath}, []string{pinned}, []string{appProc, sandboxProc}},
		{"the skipped namespace is left out", podNS, []string{pinned}, []string{appPath, sandboxPath}, nil, nil},
		{"a process that ended is passed over", self, nil, []string{"/proc/0/ns/net", appPath}, []string{appPath}, []string{appProc}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := namespacePaths(tc.skip, tc.pinned, tc.procs)
			var paths []string
			for _, ns := range got {
				paths = append(paths, ns.path)
			}
			if !slices.Equal(paths, tc.want) {
				t.Fatalf("namespacePaths = %v, want %v", paths, tc.want)
			}
			if len(got) == 1 && (got[0].id != podNS || !slices.Equal(got[0].procs, tc.wantProcs)) {
				t.Errorf("namespace %v with processes %v, want %v with %v", got[0].id, got[0].procs, podNS, tc.wantProcs)
			}
		})
	}
}

// start runs a command until the test ends.
func start(t *testing.T, name string, args ...string) *os.Process {
	t.Helper()
	cmd := exec.Command(name, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd.Process
}

// waitForNamespace waits until path's namespace is one ok accepts: a
// command that enters a namespace is in its parent's until it has.
func waitForNamespace(t *testing.T, path string, ok func(netns.ID) bool) netns.ID {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if id, err := netns.IDOf(path); err == nil && ok(id) {
			return id
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never reached its namespace", path)
		}
	}
}
