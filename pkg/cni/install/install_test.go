package install

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

const calico = `{
  "name": "k8s-pod-network",
  "cniVersion": "1.0.0",
  "plugins": [
    {"type": "calico", "ipam": {"type": "calico-ipam"}, "mtu": 1440},
    {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}
  ]
}`

const bridge = `{"cniVersion": "0.4.0", "name": "bridge-net", "type": "bridge", "bridge": "cni0",
  "ipam": {"type": "host-local", "subnet": "10.22.0.0/16"}}`

// node is a fake node's CNI directories, with a binary to install.
type node struct {
	conf, bin, src string
	binary         []byte
}

func newNode(t *testing.T, files map[string]string) *node {
	t.Helper()
	root := t.TempDir()
	n := &node{conf: filepath.Join(root, "net.d"), bin: filepath.Join(root, "bin"), src: filepath.Join(root, "pilot"),
		binary: []byte("#!/bin/sh\necho the plugin\n")}
	for _, d := range []string{n.conf, n.bin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(n.src, n.binary, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		n.write(t, name, data)
	}
	return n
}

func (n *node) write(t *testing.T, name, data string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(n.conf, name), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (n *node) installer(t *testing.T) *Installer {
	t.Helper()
	in, err := New(Options{ConfDir: n.conf, BinDir: n.bin, SourceBinary: n.src,
		AgentSocket: "/run/agent.sock", ExcludeNamespaces: []string{"kube-system"}})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// types returns the plugin types of a conflist in order.
func types(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Plugins []struct {
			Type string `json:"type"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(data, &list); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []string
	for _, p := range list.Plugins {
		out = append(out, p.Type)
	}
	return out
}

func TestInstall(t *testing.T) {
	withStale := `{"name": "k8s-pod-network", "cniVersion": "1.0.0", "plugins": [
	  {"type": "calico"}, {"type": "meshpilot-cni", "agentSocket": "/old"}, {"type": "portmap"}]}`
	cases := []struct {
		name      string
		files     map[string]string
		primary   string // the file that must hold the entry afterwards
		wantTypes []string
		gone      string // a file that must not exist afterwards
	}{
		{"conflist, chained last", map[string]string{"10-calico.conflist": calico, "99-loopback.conf": bridge},
			"10-calico.conflist", []string{"calico", "portmap", "meshpilot-cni"}, ""},
		{"a single .conf becomes a .conflist", map[string]string{"10-bridge.conf": bridge},
			"10-bridge.conflist", []string{"bridge", "meshpilot-cni"}, "10-bridge.conf"},
		{"a stale entry of ours moves last, once", map[string]string{"05-calico.conflist": withStale},
			"05-calico.conflist", []string{"calico", "portmap", "meshpilot-cni"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, tc.files)
			in := n.installer(t)
			if err := in.Install(); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(n.conf, tc.primary)
			if got := types(t, path); !reflect.DeepEqual(got, tc.wantTypes) {
				t.Errorf("plugins %v, want %v", got, tc.wantTypes)
			}
			if tc.gone != "" {
				if _, err := os.Stat(filepath.Join(n.conf, tc.gone)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s still there: the runtime would read it first and miss the plugin", tc.gone)
				}
			}
			// The entry carries what the plugin reads.
			data, _ := os.ReadFile(path)
			var list struct{ Plugins []map[string]any }
			json.Unmarshal(data, &list)
			last := list.Plugins[len(list.Plugins)-1]
			if last["agentSocket"] != "/run/agent.sock" || !reflect.DeepEqual(last["excludeNamespaces"], []any{"kube-system"}) {
				t.Errorf("entry %v lacks the agent socket or excluded namespaces", last)
			}
			// The binary, under the entry's type, executable.
			fi, err := os.Stat(filepath.Join(n.bin, "meshpilot-cni"))
			if err != nil || fi.Mode().Perm()&0o111 == 0 {
				t.Fatalf("binary not installed executable: %v %v", fi, err)
			}
			if got, _ := os.ReadFile(filepath.Join(n.bin, "meshpilot-cni")); !bytes.Equal(got, n.binary) {
				t.Error("installed binary differs from the source")
			}
			// Running again changes nothing.
			if wrote, err := in.ensureEntry(); err != nil || wrote {
				t.Errorf("second pass wrote=%v err=%v; want an idempotent no-op", wrote, err)
			}
			if again, _ := os.ReadFile(path); !bytes.Equal(again, data) {
				t.Error("second install changed the file")
			}
		})
	}
}

// A primary config its owner made private (as some plugins do, for the
// credentials in it) stays private through install and uninstall.
func TestInstallKeepsThePrimaryConfigsMode(t *testing.T) {
	n := newNode(t, map[string]string{"10-calico.conflist": calico})
	path := filepath.Join(n.conf, "10-calico.conflist")
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	in := n.installer(t)
	for _, step := range []struct {
		name string
		do   func() error
	}{{"install", in.Install}, {"uninstall", in.Uninstall}} {
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("after %s the primary config is %v, want -rw-------", step.name, fi.Mode().Perm())
		}
	}
}

func TestInstallWithoutAPrimaryConfigWaits(t *testing.T) {
	n := newNode(t, nil)
	if err := n.installer(t).Install(); !errors.Is(err, errNoPrimary) {
		t.Fatalf("Install = %v, want errNoPrimary", err)
	}
	if entries, _ := os.ReadDir(n.conf); len(entries) != 0 {
		t.Errorf("wrote %v into an empty conf dir; the primary plugin's network must come first", entries)
	}
}

// waitTypes polls until path lists want, since Run reacts to file events.
func waitTypes(t *testing.T, path string, want []string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if data, err := os.ReadFile(path); err == nil && json.Valid(data) {
			if got := types(t, path); reflect.DeepEqual(got, want) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never listed %v", path, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRunRepairsAndRemovesOnlyItsOwnEntryOnStop(t *testing.T) {
	n := newNode(t, nil) // the primary plugin comes after the installer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	in := n.installer(t)
	go func() { done <- in.Run(ctx) }()
	select {
	case <-in.Installed():
	case err := <-done:
		t.Fatalf("Run ended before installing: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Installed never closed")
	}
	if _, err := os.Stat(filepath.Join(n.bin, "meshpilot-cni")); err != nil {
		t.Errorf("Installed closed before the binary was in place: %v", err)
	}
	path := filepath.Join(n.conf, "10-calico.conflist")
	other := filepath.Join(n.conf, "20-other.conflist")

	// A first config appears, then one that sorts before it: the entry
	// follows the primary and leaves the file that no longer is.
	n.write(t, "20-other.conflist", calico)
	waitTypes(t, other, []string{"calico", "portmap", "meshpilot-cni"})
	n.write(t, "10-calico.conflist", calico)
	waitTypes(t, path, []string{"calico", "portmap", "meshpilot-cni"})
	waitTypes(t, other, []string{"calico", "portmap"})

	// The primary plugin rewrites its file, as calico-node does on restart.
	n.write(t, "10-calico.conflist", calico)
	waitTypes(t, path, []string{"calico", "portmap", "meshpilot-cni"})

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := types(t, path); !reflect.DeepEqual(got, []string{"calico", "portmap"}) {
		t.Errorf("after stop plugins %v, want the primary's own", got)
	}
	if got := types(t, other); !reflect.DeepEqual(got, []string{"calico", "portmap"}) {
		t.Errorf("the former primary lists %v after stop", got)
	}
	if _, err := os.Stat(filepath.Join(n.bin, "meshpilot-cni")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("binary left behind after stop: %v", err)
	}
}

func TestKubeconfigFromServiceAccount(t *testing.T) {
	dir := t.TempDir()
	ca, token := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "token")
	os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), 0o644)
	os.WriteFile(token, []byte("the-token"), 0o600)
	n := newNode(t, map[string]string{"10-calico.conflist": calico})
	in, err := New(Options{ConfDir: n.conf, BinDir: n.bin, SourceBinary: n.src,
		Kubeconfig: &KubeconfigSource{Server: "https://10.96.0.1:443", CAFile: ca, TokenFile: token}})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Install(); err != nil {
		t.Fatal(err)
	}
	kcPath := filepath.Join(n.conf, kubeconfigName)
	fi, err := os.Stat(kcPath)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig %v %v, want mode 0600: it holds a token", fi, err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kcPath)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://10.96.0.1:443" || cfg.BearerToken != "the-token" || len(cfg.CAData) == 0 {
		t.Errorf("kubeconfig gives host %q token %q", cfg.Host, cfg.BearerToken)
	}
	data, _ := os.ReadFile(filepath.Join(n.conf, "10-calico.conflist"))
	if !bytes.Contains(data, []byte(`"kubeconfig": "`+kcPath+`"`)) {
		t.Errorf("entry does not name the kubeconfig:\n%s", data)
	}
}

// A primary config that is a symlink is the one the runtime reads, as
// libcni lists symlinks too: the entry must go there, never into the next
// file, which no pod uses. A link the installer cannot read (its target
// outside the mounted directory) is an error, and no file gets the entry.
func TestInstallSymlinkedPrimary(t *testing.T) {
	for _, tc := range []struct {
		name   string
		target func(t *testing.T, dir string) string // what 10-calico.conflist links to
		ok     bool
	}{
		{"link to a file", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "calico.conflist")
			if err := os.WriteFile(p, []byte(calico), 0o644); err != nil {
				t.Fatal(err)
			}
			return p
		}, true},
		{"dangling link", func(_ *testing.T, dir string) string { return filepath.Join(dir, "gone.conflist") }, false},
		{"link to a directory", func(_ *testing.T, dir string) string { return dir }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, map[string]string{"20-other.conflist": calico})
			primary := filepath.Join(n.conf, "10-calico.conflist")
			if err := os.Symlink(tc.target(t, t.TempDir()), primary); err != nil {
				t.Fatal(err)
			}
			err := n.installer(t).Install()
			if (err == nil) != tc.ok {
				t.Fatalf("Install = %v, want ok %v", err, tc.ok)
			}
			if tc.ok {
				if got, want := types(t, primary), []string{"calico", "portmap", "meshpilot-cni"}; !reflect.DeepEqual(got, want) {
					t.Errorf("the primary lists %v, want %v", got, want)
				}
			}
			if got, want := types(t, filepath.Join(n.conf, "20-other.conflist")), []string{"calico", "portmap"}; !reflect.DeepEqual(got, want) {
				t.Errorf("20-other.conflist, which the runtime does not use, lists %v, want %v", got, want)
			}
			if err := n.installer(t).Uninstall(); err != nil {
				t.Errorf("Uninstall: %v", err)
			}
		})
	}
}
