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
// as the kubelet names a pod's, and asks whether the namespace may be
// captured for that pod, for another, and with no process to tell.
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

	if err := checkOwner(ns.Path, owner); err != nil {
		t.Errorf("the owner's own namespace: %v", err)
	}
	if err := checkOwner(ns.Path, other); !errors.Is(err, errNetnsNotFound) {
		t.Errorf("another pod's namespace: %v, want it refused", err)
	}
	if err := checkOwner(empty.Path, other); err != nil {
		t.Errorf("a namespace with no process to tell: %v, want the addresses trusted", err)
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
