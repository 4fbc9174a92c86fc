package install

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
)

// errNoPrimary means the primary network plugin has not written its config
// yet; the installer waits for it rather than inventing a network.
var errNoPrimary = errors.New("no primary CNI config (*.conf or *.conflist) yet")

// confFiles returns the *.conf and *.conflist files of dir, in the
// runtime's order. Every entry but a directory counts, symlinks included,
// as libcni lists them: a primary config that is a symlink is still the
// one the runtime reads, and passing it over would chain us into a config
// no pod uses. One we cannot read (a link to a path outside our mount) is
// then an error, not a reason to write the next file.
func confFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		n := e.Name()
		if !e.IsDir() && (strings.HasSuffix(n, ".conf") || strings.HasSuffix(n, ".conflist")) {
			names = append(names, filepath.Join(dir, n))
		}
	}
	sort.Strings(names)
	return names, nil
}

// primaryConf returns the config file the runtime uses: the first *.conf or
// *.conflist by name, as libcni (and so containerd and CRI-O) orders them.
func primaryConf(dir string) (string, error) {
	names, err := confFiles(dir)
	if err != nil {
		return "", err
	}
	if len(names) == 0 {
		return "", errNoPrimary
	}
	return names[0], nil
}

// withEntry returns the conflist in data (a .conflist, or a single plugin's
// .conf, which becomes the only element of a list) with entry as its last
// plugin, replacing any earlier entry of the same type; changed is false
// when data already was that, so a repair pass writes nothing.
func withEntry(data []byte, isConflist bool, entry map[string]any) (out []byte, changed bool, err error) {
	list, err := asConflist(data, isConflist)
	if err != nil {
		return nil, false, err
	}
	plugins, _ := list["plugins"].([]any)
	typ := entry["type"]
	var kept []any
	for _, p := range plugins {
		if m, ok := p.(map[string]any); ok && m["type"] == typ {
			continue
		}
		kept = append(kept, p)
	}
	if len(kept) == 0 {
		return nil, false, fmt.Errorf("the conflist has no plugin but ours: nothing to chain after")
	}
	// Compare through JSON so that entry's Go types match what was parsed.
	var want map[string]any
	b, _ := json.Marshal(entry)
	_ = json.Unmarshal(b, &want)
	kept = append(kept, want)
	if isConflist && reflect.DeepEqual(kept, plugins) {
		return data, false, nil
	}
	list["plugins"] = kept
	out, err = json.MarshalIndent(list, "", "  ")
	return append(out, '\n'), true, err
}

// withoutEntry returns the conflist without plugins of type typ.
func withoutEntry(data []byte, typ string) (out []byte, changed bool, err error) {
	var list map[string]any
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, false, err
	}
	plugins, _ := list["plugins"].([]any)
	var kept []any
	for _, p := range plugins {
		if m, ok := p.(map[string]any); ok && m["type"] == typ {
			continue
		}
		kept = append(kept, p)
	}
	if len(kept) == len(plugins) {
		return data, false, nil
	}
	list["plugins"] = kept
	out, err = json.MarshalIndent(list, "", "  ")
	return append(out, '\n'), true, err
}

func asConflist(data []byte, isConflist bool) (map[string]any, error) {
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("parse CNI config: %w", err)
	}
	if isConflist {
		if _, ok := m["plugins"].([]any); !ok {
			return nil, errors.New("conflist has no plugins list")
		}
		return m, nil
	}
	// A .conf is one plugin; the list takes its version and name, which
	// the runtime reads from the list from now on.
	return map[string]any{"cniVersion": m["cniVersion"], "name": m["name"], "plugins": []any{m}}, nil
}

// writeAtomic replaces path so that a runtime reading it never sees half a
// file.
func writeAtomic(path string, data []byte, mode os.FileMode) error {
	return writeAtomicFrom(path, bytes.NewReader(data), mode)
}

// writeAtomicFrom is writeAtomic of what r holds, streamed: from a file,
// io.Copy has the kernel copy it (copy_file_range), and nothing is held in
// memory.
func writeAtomicFrom(path string, r io.Reader, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, r); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
