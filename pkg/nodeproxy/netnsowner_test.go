package nodeproxy

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/netnstest"
	"github.com/meshpilot/meshpilot/pkg/netns"
)

func TestPodUIDsInCgroups(t *testing.T) {
	const uid = "0f6f2c1e-4b8a-4d2e-9c3b-7a1d2e3f4a5b"
	for _, tc := range []struct {
		name, cgroups string
		want          []string
	}{
		{"cgroupfs driver, cgroup v1", "12:pids:/kubepods/burstable/pod" + uid + "/1c2d3e\n11:memory:/kubepods/burstable/pod" + uid + "/1c2d3e\n", []string{uid}},
		{"systemd driver, cgroup v2", "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0f6f2c1e_4b8a_4d2e_9c3b_7a1d2e3f4a5b.slice/cri-containerd-1c2d3e.scope\n", []string{uid}},
		{"not a pod's", "0::/system.slice/containerd.service\n", nil},
		{"not a UID", "0::/kubepods/podcast/1c2d3e\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := podUIDsInCgroups(tc.cgroups); !slices.Equal(got, tc.want) {
				t.Errorf("podUIDsInCgroups = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestCheckOwner runs a process in a network namespace, in a cgroup named
// as the kubelet names a pod's, scans the node as an enrolment does, and
// asks whether the namespace may be captured for that pod, for another,
// with no process to tell, and once its process has ended since the scan.
// The namespace is pinned, as ip netns pins it: its process is the
// scan's all the same.
func TestCheckOwner(t *testing.T) {
	ns, empty := netnstest.Pair(t)
	const owner, other = "0f6f2c1e-4b8a-4d2e-9c3b-7a1d2e3f4a5b", "9e8d7c6b-5a49-4837-a625-1403f2e1d0c9"
	sleep := exec.Command("ip", "netns", "exec", ns.Name, "sleep", "300")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	joinPodCgroup(t, sleep.Process.Pid, owner, func() { _ = sleep.Process.Kill(); _ = sleep.Wait() })
	// ip enters the namespace, then becomes sleep: wait for the first.
	want, err := netns.IDOf(ns.Path)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if got, err := netns.IDOf(fmt.Sprintf("/proc/%d/ns/net", sleep.Process.Pid)); err == nil && got == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the process never entered the namespace")
		}
	}

	found, none := scanned(t, ns.Path), scanned(t, empty.Path)
	if err := checkOwner(found, owner); err != nil {
		t.Errorf("the owner's own namespace: %v", err)
	}
	if err := checkOwner(found, other); !errors.Is(err, errNetnsNotFound) {
		t.Errorf("another pod's namespace: %v, want it refused", err)
	}
	if err := checkOwner(none, other); err != nil {
		t.Errorf("a namespace with no process to tell: %v, want the addresses trusted", err)
	}
	_ = sleep.Process.Kill()
	_ = sleep.Wait()
	if err := checkOwner(found, other); err != nil {
		t.Errorf("a namespace whose process ended since the scan: %v, want the addresses trusted", err)
	}
}

// scanned is the namespace at path as a scan of the node finds it.
func scanned(t *testing.T, path string) scannedNetns {
	t.Helper()
	self, err := netns.IDOf("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	pinned, _ := filepath.Glob(pinnedNetnsGlob)
	procs, _ := filepath.Glob(processNetnsGlob)
	for _, ns := range namespacePaths(self, pinned, procs) {
		if ns.path == path {
			return ns
		}
	}
	t.Fatalf("the scan did not find %s", path)
	return scannedNetns{}
}

// TestCheckOwnerReadsTheScannedProcesses hands the owner check processes
// that are not in /proc: directories standing for /proc/<pid>, each with
// a cgroup file and an ns/net linking to a plain file that stands for its
// namespace. No real process is in that namespace, so what the check
// decides comes from the processes it is given, not from a walk of /proc.
func TestCheckOwnerReadsTheScannedProcesses(t *testing.T) {
	const owner, other = "0f6f2c1e-4b8a-4d2e-9c3b-7a1d2e3f4a5b", "9e8d7c6b-5a49-4837-a625-1403f2e1d0c9"
	dir := t.TempDir()
	for _, name := range []string{"netns-a", "netns-b"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	proc := func(pid, ns, cgroups string) string {
		t.Helper()
		p := filepath.Join(dir, "proc", pid)
		if err := os.MkdirAll(filepath.Join(p, "ns"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(dir, ns), filepath.Join(p, "ns", "net")); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "cgroup"), []byte(cgroups), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	podProc := proc("10", "netns-a", "0::/kubepods/besteffort/pod"+owner+"/c1\n")
	plainProc := proc("11", "netns-a", "0::/system.slice/containerd.service\n")
	// The scan found 12 in the namespace; by the check, its PID is a
	// process's in another pod's namespace.
	reusedProc := proc("12", "netns-b", "0::/kubepods/besteffort/pod"+other+"/c2\n")
	endedProc := filepath.Join(dir, "proc", "13")
	a, err := netns.IDOf(filepath.Join(dir, "netns-a"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		path    string // netns-a unless set
		procs   []string
		uid     string
		refused bool
	}{
		{"the pod's own", "", []string{podProc, plainProc, reusedProc, endedProc}, owner, false},
		{"another pod's", "", []string{podProc, plainProc, reusedProc, endedProc}, other, true},
		{"no process names a pod", "", []string{plainProc, endedProc}, other, false},
		{"its processes ended since the scan", "", []string{endedProc}, other, false},
		{"a PID another namespace's process was given", "", []string{reusedProc}, owner, false},
		// Its path names another namespace since the scan.
		{"a path given to another namespace", "netns-b", []string{podProc}, owner, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "netns-a")
			if tc.path != "" {
				path = filepath.Join(dir, tc.path)
			}
			err := checkOwner(scannedNetns{path: path, id: a, procs: tc.procs}, tc.uid)
			if refused := errors.Is(err, errNetnsNotFound); refused != tc.refused || (err != nil && !refused) {
				t.Errorf("checkOwner = %v, want refused %v", err, tc.refused)
			}
		})
	}
}

// joinPodCgroup moves pid into a new cgroup named like a pod's
// (…/kubepods/pod<uid>) in the first hierarchy that takes it, v1 or v2.
// When the test ends it calls stop, which must end the process, and then
// removes the cgroup, which only an empty cgroup allows.
func joinPodCgroup(t *testing.T, pid int, uid string, stop func()) {
	t.Helper()
	var tried []error
	for _, root := range []string{"/sys/fs/cgroup/pids", "/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		dir := filepath.Join(root, fmt.Sprintf("meshpilot-test-%d", os.Getpid()), "kubepods", "pod"+uid)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			tried = append(tried, err)
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			tried = append(tried, err)
			_ = os.Remove(dir)
			continue
		}
		t.Cleanup(func() {
			stop()
			for d := dir; d != root; d = filepath.Dir(d) {
				_ = os.Remove(d)
			}
		})
		return
	}
	stop()
	t.Fatalf("no cgroup hierarchy took the process: %v", errors.Join(tried...))
}
