package nodeproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/meshpilot/meshpilot/pkg/netns"
)

// Where a node's pod namespaces can be found: those the runtime pins
// (containerd, CRI-O, ip netns) first, so that a stable path is kept over a
// process's, then every process's (cri-dockerd pins none).
const (
	pinnedNetnsGlob  = "/var/run/netns/*"
	processNetnsGlob = "/proc/[0-9]*/ns/net"
)

// rediscover serves again the pods an earlier agent captured: this node's
// Pods with the annotation, each in the namespace that holds its IP and
// the capture. Their rules are left as they are, so their traffic is not
// disturbed; one whose namespace cannot be found is logged and left to its
// DEL.
func (p *Proxy) rediscover(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pods, err := p.opts.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", p.opts.Node).String(),
	})
	if err != nil {
		p.log.Error("node agent: cannot list this node's Pods to find captured ones", "err", err)
		return
	}
	var captured []*corev1.Pod
	for i := range pods.Items {
		if pods.Items[i].Annotations[RedirectionAnnotation] == "enabled" {
			captured = append(captured, &pods.Items[i])
		}
	}
	if len(captured) == 0 {
		return
	}
	byIP := scanNamespaces(p)
	for _, pod := range captured {
		key := pod.Namespace + "/" + pod.Name
		var ips []netip.Addr
		var candidates []string
		for _, s := range pod.Status.PodIPs {
			if ip, err := netip.ParseAddr(s.IP); err == nil {
				ips = append(ips, ip.Unmap())
				candidates = append(candidates, byIP[ip.Unmap()]...)
			}
		}
		// Of the namespaces holding the Pod's IP, the one with the capture
		// is the Pod's; a stray copy of the address elsewhere is not.
		var path string
		found := 0
		for _, c := range slices.Compact(slices.Sorted(slices.Values(candidates))) {
			if ok, err := p.capture().Installed(c); err == nil && ok {
				path = c
				found++
			}
		}
		if found != 1 {
			p.log.Warn("node agent: captured Pod's network namespace not found", "pod", key, "ips", ips, "captured namespaces with its IP", found)
			continue
		}
		p.agent.mu.Lock()
		p.agent.captured[key] = &capturedPod{w: podWorkload(pod, ips, p.opts.TrustDomain), netns: path}
		p.agent.mu.Unlock()
		p.log.Info("node agent: captured pod rediscovered", "pod", key, "netns", path)
	}
}

// scanNamespaces maps each address found in the node's network namespaces
// (other than the proxy's own, and loopback) to the paths of the
// namespaces that hold it, one path per namespace.
func scanNamespaces(p *Proxy) map[netip.Addr][]string {
	self, _ := netns.IDOf("/proc/self/ns/net")
	pinned, _ := filepath.Glob(pinnedNetnsGlob)
	procs, _ := filepath.Glob(processNetnsGlob)
	byIP := map[netip.Addr][]string{}
	for _, path := range namespacePaths(self, pinned, procs) {
		addrs, err := namespaceAddrs(path)
		if err != nil {
			p.log.Debug("node agent: namespace not readable", "netns", path, "err", err)
			continue
		}
		for _, ip := range addrs {
			byIP[ip] = append(byIP[ip], path)
		}
	}
	return byIP
}

// namespacePaths names each namespace that pinned or procs reach, but
// skip, once: by its first pinned path, or else by the path of its oldest
// process. The path is kept in a capture's record, to release it later,
// and a process's dies with it: in a pod whose runtime pins nothing, the
// oldest process is the sandbox's own (the pause container's), which
// lives as long as the namespace is the pod's, where an application's
// container may restart and take its path with it.
func namespacePaths(skip netns.ID, pinned, procs []string) []string {
	seen := map[netns.ID]bool{skip: true}
	var out []string
	for _, path := range pinned {
		if id, err := netns.IDOf(path); err == nil && !seen[id] {
			seen[id] = true
			out = append(out, path)
		}
	}
	type oldest struct {
		path  string
		start uint64
	}
	byID := map[netns.ID]oldest{}
	var order []netns.ID
	for _, path := range procs {
		id, err := netns.IDOf(path)
		if err != nil || seen[id] {
			continue // a process that ended, or a namespace pinned
		}
		start, err := processStart(filepath.Dir(filepath.Dir(path)))
		if err != nil {
			continue
		}
		cur, found := byID[id]
		if !found {
			order = append(order, id)
		}
		if !found || start < cur.start {
			byID[id] = oldest{path: path, start: start}
		}
	}
	for _, id := range order {
		out = append(out, byID[id].path)
	}
	return out
}

// processStart is when the process at /proc/<pid> started, in clock ticks
// since boot: the 22nd field of its stat file, counted after the command
// name, which may itself hold spaces and parentheses.
func processStart(proc string) (uint64, error) {
	stat, err := os.ReadFile(proc + "/stat")
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("%s/stat: no command name", proc)
	}
	// After the name come the fields from the third (the state) on.
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 20 {
		return 0, fmt.Errorf("%s/stat: %d fields after the command name", proc, len(fields))
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

// namespaceAddrs returns the addresses of the interfaces in the namespace
// at path, loopback and link-local left out.
func namespaceAddrs(path string) ([]netip.Addr, error) {
	var out []netip.Addr
	err := netns.Do(path, func() error {
		// The netlink socket is opened on this thread, so in the namespace.
		addrs, err := net.InterfaceAddrs()
		if err != nil {
			return err
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(ipn.IP)
			if !ok {
				continue
			}
			ip = ip.Unmap()
			if ip.IsLoopback() || ip.IsLinkLocalUnicast() {
				continue
			}
			out = append(out, ip)
		}
		return nil
	})
	if err == nil && len(out) == 0 {
		err = errors.New("no address")
	}
	return out, err
}
