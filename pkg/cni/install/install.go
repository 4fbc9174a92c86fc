package install

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/meshpilot/meshpilot/pkg/cni/agentapi"
)

// Options are `pilot cni install`'s settings.
type Options struct {
	ConfDir string // the node's CNI config directory
	BinDir  string // the node's CNI binary directory
	// PluginName is the binary's name in BinDir and the entry's type,
	// which is how the runtime finds the binary.
	PluginName string
	// SourceBinary is what is copied; usually this very process's binary,
	// which becomes the plugin when the runtime sets CNI_COMMAND.
	SourceBinary string
	// AgentSocket, ExcludeNamespaces and AgentTimeout go into the entry.
	AgentSocket       string
	AgentTimeout      time.Duration
	ExcludeNamespaces []string
	// Kubeconfig, when set, is written into ConfDir under this name and
	// named in the entry, so the plugin can read Pods.
	Kubeconfig *KubeconfigSource
	Log        *slog.Logger
}

// DefaultPluginName is the entry's type and the binary's name.
const DefaultPluginName = "meshpilot-cni"

// kubeconfigName is the file the kubeconfig is written to in ConfDir; it
// ends in neither .conf nor .conflist, so the runtime never reads it.
const kubeconfigName = "meshpilot-cni-kubeconfig"

// Installer keeps one node's plugin installed.
type Installer struct {
	opt Options
	log *slog.Logger
	// installed is closed once Run has copied the plugin and its files.
	installed chan struct{}
}

// New checks opt and fills in its defaults.
func New(opt Options) (*Installer, error) {
	if opt.ConfDir == "" || opt.BinDir == "" || opt.SourceBinary == "" {
		return nil, errors.New("install: ConfDir, BinDir and SourceBinary are required")
	}
	if opt.PluginName == "" {
		opt.PluginName = DefaultPluginName
	}
	if strings.ContainsRune(opt.PluginName, '/') {
		return nil, fmt.Errorf("install: plugin name %q must be a file name", opt.PluginName)
	}
	if opt.AgentSocket == "" {
		opt.AgentSocket = agentapi.DefaultSocketPath
	}
	log := opt.Log
	if log == nil {
		log = slog.Default()
	}
	return &Installer{opt: opt, log: log, installed: make(chan struct{})}, nil
}

// entry is the plugin's element of the conflist.
func (in *Installer) entry() map[string]any {
	e := map[string]any{"type": in.opt.PluginName, "agentSocket": in.opt.AgentSocket}
	if in.opt.Kubeconfig != nil {
		e["kubeconfig"] = filepath.Join(in.opt.ConfDir, kubeconfigName)
	}
	if in.opt.AgentTimeout > 0 {
		e["agentTimeout"] = in.opt.AgentTimeout.String()
	}
	if len(in.opt.ExcludeNamespaces) > 0 {
		e["excludeNamespaces"] = in.opt.ExcludeNamespaces
	}
	return e
}

// Install copies the binary and writes the kubeconfig and the entry. It
// returns errNoPrimary (wrapped) when there is no primary config yet.
func (in *Installer) Install() error {
	if err := in.installFiles(); err != nil {
		return err
	}
	_, err := in.ensureEntry()
	return err
}

// installFiles copies the binary and writes the kubeconfig, both before the
// entry that makes the runtime use them.
func (in *Installer) installFiles() error {
	if err := in.copyBinary(); err != nil {
		return err
	}
	if in.opt.Kubeconfig != nil {
		return in.opt.Kubeconfig.write(filepath.Join(in.opt.ConfDir, kubeconfigName))
	}
	return nil
}

// ensureEntry appends the entry to the primary config unless it is there
// already; it reports whether it wrote. A primary .conf is replaced by a
// .conflist of the same name, as the runtime would otherwise keep reading
// the .conf without us.
func (in *Installer) ensureEntry() (bool, error) {
	path, err := primaryConf(in.opt.ConfDir)
	if err != nil {
		return false, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	isList := strings.HasSuffix(path, ".conflist")
	out, changed, err := withEntry(data, isList, in.entry())
	if err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	// A file that was primary before (a new one sorts first now) keeps
	// no entry of ours: only one chain may run the plugin.
	in.removeEntry(path)
	if !changed {
		return false, nil
	}
	target := path
	if !isList {
		target = strings.TrimSuffix(path, ".conf") + ".conflist"
	}
	if err := writeAtomic(target, out, fileMode(path)); err != nil {
		return false, err
	}
	if target != path {
		if err := os.Remove(path); err != nil {
			return true, err
		}
	}
	in.log.Info("CNI plugin entry written", "file", target)
	return true, nil
}

// fileMode is the permission bits of the primary plugin's file, which a
// rewrite keeps: a conflist its owner made private stays private.
func fileMode(path string) os.FileMode {
	if fi, err := os.Stat(path); err == nil {
		return fi.Mode().Perm()
	}
	return 0o644
}

func (in *Installer) copyBinary() error {
	src, err := os.Open(in.opt.SourceBinary)
	if err != nil {
		return err
	}
	defer src.Close()
	// Through a rename, so a runtime executing the old copy is not hit by
	// "text file busy" and never runs half a binary. Streamed: read whole,
	// the 115 MB binary grew the heap to 270 MB, which stayed in the
	// installer's RSS.
	return writeAtomicFrom(filepath.Join(in.opt.BinDir, in.opt.PluginName), src, 0o755)
}

// Uninstall removes the entry from the primary config, the binary and the
// kubeconfig, and nothing else: the primary plugin's config stays as the
// primary plugin last wrote it (a .conf we turned into a .conflist stays a
// .conflist, which the runtime reads the same).
func (in *Installer) Uninstall() error {
	errs := []error{in.removeEntry("")}
	for _, p := range []string{filepath.Join(in.opt.BinDir, in.opt.PluginName), filepath.Join(in.opt.ConfDir, kubeconfigName)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeEntry removes the entry from every .conflist in ConfDir but keep,
// and touches no file that has none.
func (in *Installer) removeEntry(keep string) error {
	files, err := confFiles(in.opt.ConfDir)
	if err != nil {
		return err
	}
	var errs []error
	for _, path := range files {
		if path == keep || !strings.HasSuffix(path, ".conflist") {
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			// A symlink we cannot follow holds no entry of ours: we never
			// write through one we cannot read.
			if !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.EISDIR) {
				errs = append(errs, err)
			}
			continue
		}
		out, changed, err := withoutEntry(data, in.opt.PluginName)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
		} else if changed {
			errs = append(errs, writeAtomic(path, out, fileMode(path)))
		}
	}
	return errors.Join(errs...)
}

// Installed is closed once Run has copied the plugin's binary and files
// into place; its conflist entry may still wait for the primary plugin.
func (in *Installer) Installed() <-chan struct{} { return in.installed }

// Run installs, then keeps the entry in place until ctx ends, and then
// uninstalls. A missing primary config is waited for, not an error.
func (in *Installer) Run(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	// Watch before the first install, so that a rewrite between the two
	// is not missed.
	if err := w.Add(in.opt.ConfDir); err != nil {
		return fmt.Errorf("watch %s: %w", in.opt.ConfDir, err)
	}
	if err := in.installFiles(); err != nil {
		return err
	}
	close(in.installed)
	// A config we cannot use yet (none, or one the primary plugin is
	// half-way through writing) is waited for: its next event retries.
	if _, err := in.ensureEntry(); errors.Is(err, errNoPrimary) {
		in.log.Info("waiting for the primary CNI plugin's config", "dir", in.opt.ConfDir)
	} else if err != nil {
		in.log.Warn("CNI plugin entry not written yet", "err", err)
	}
	defer func() {
		if err := in.Uninstall(); err != nil {
			in.log.Error("CNI plugin not fully removed", "err", err)
		} else {
			in.log.Info("CNI plugin entry and binary removed")
		}
	}()
	// The ServiceAccount token is bound and rotated by the kubelet; the
	// plugin's copy is refreshed well within its lifetime.
	refresh := time.NewTicker(time.Minute)
	defer refresh.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-refresh.C:
			if in.opt.Kubeconfig != nil {
				if err := in.opt.Kubeconfig.write(filepath.Join(in.opt.ConfDir, kubeconfigName)); err != nil {
					in.log.Warn("plugin kubeconfig not refreshed", "err", err)
				}
			}
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("directory watch closed")
			}
			in.log.Debug("CNI config directory changed", "event", ev.String())
			if _, err := in.ensureEntry(); err != nil && !errors.Is(err, errNoPrimary) {
				// Most likely a primary plugin half-way through writing;
				// its next event brings us back.
				in.log.Warn("CNI plugin entry not repaired yet", "err", err)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("directory watch closed")
			}
			in.log.Warn("watching the CNI config directory", "err", err)
		}
	}
}
