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
	byIP := scanNamespaces(p).byIP
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

// scannedNetns is a network namespace as a scan found it: the path to
// enter it by, its identity, and the processes that were in it, as their
// /proc/<pid> directories. The processes are kept for the owner check,
// which would otherwise walk all of /proc again for each pod it checks.
type scannedNetns struct {
	path  string
	id    netns.ID
	procs []string
}

// nodeNamespaces is one scan of the node's network namespaces.
type nodeNamespaces struct {
	// byIP maps each address to the paths of the namespaces that hold
	// it, one path per namespace.
	byIP map[netip.Addr][]string
	// byPath is each namespace of byIP, by its path.
	byPath map[string]scannedNetns
}

// scanNamespaces finds the namespaces that hold each address of the node
// (other than the proxy's own, and loopback).
func scanNamespaces(p *Proxy) nodeNamespaces {
	self, _ := netns.IDOf("/proc/self/ns/net")
	pinned, _ := filepath.Glob(pinnedNetnsGlob)
	procs, _ := filepath.Glob(processNetnsGlob)
	found := nodeNamespaces{byIP: map[netip.Addr][]string{}, byPath: map[string]scannedNetns{}}
	for _, ns := range namespacePaths(self, pinned, procs) {
		addrs, err := namespaceAddrs(ns.path)
		if err != nil {
			p.log.Debug("node agent: namespace not readable", "netns", ns.path, "err", err)
			continue
		}
		found.byPath[ns.path] = ns
		for _, ip := range addrs {
			found.byIP[ip] = append(found.byIP[ip], ns.path)
		}
	}
	return found
}

// namespacePaths names each namespace that pinned or procs reach, but
// skip, once: by its first pinned path, or else by the path of its oldest
// process. The path is kept in a capture's record, to release it later,
// and a process's dies with it: in a pod whose runtime pins nothing, the
// oldest process is the sandbox's own (the pause container's), which
// lives as long as the namespace is the pod's, where an application's
// container may restart and take its path with it. Each namespace comes
// with every process of procs found in it, pinned or not.
func namespacePaths(skip netns.ID, pinned, procs []string) []scannedNetns {
	byID := map[netns.ID]*scannedNetns{}
	var order []netns.ID
	for _, path := range pinned {
		if id, err := netns.IDOf(path); err == nil && id != skip && byID[id] == nil {
			byID[id] = &scannedNetns{path: path, id: id}
			order = append(order, id)
		}
	}
	// The start of the oldest process of each namespace not pinned.
	oldest := map[netns.ID]uint64{}
	for _, path := range procs {
		id, err := netns.IDOf(path)
		if err != nil || id == skip {
			continue // a process that ended, or one in the proxy's namespace
		}
		proc := filepath.Dir(filepath.Dir(path))
		ns := byID[id]
		if _, unpinned := oldest[id]; ns != nil && !unpinned {
			ns.procs = append(ns.procs, proc)
			continue
		}
		start, err := processStart(proc)
		if err != nil {
			continue
		}
		switch {
		case ns == nil:
			ns = &scannedNetns{path: path, id: id}
			byID[id], oldest[id] = ns, start
			order = append(order, id)
		case start < oldest[id]:
			ns.path, oldest[id] = path, start
		}
		ns.procs = append(ns.procs, proc)
	}
	out := make([]scannedNetns, 0, len(order))
	for _, id := range order {
		out = append(out, *byID[id])
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
