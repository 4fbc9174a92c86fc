package bootstrap

import (
	"context"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/meshpilot/meshpilot/pkg/dirwatch"
)

// meshSettings are the mesh config settings meshpilot reads, named as in
// the mesh config, each with its value as Options hold it.
var meshSettings = []struct {
	name  string
	value func(*Options) string
}{
	{"rootNamespace", func(o *Options) string { return o.RootNamespace }},
	{"trustDomain", func(o *Options) string { return o.TrustDomain }},
	{"enableAutoMtls", func(o *Options) string { return strconv.FormatBool(!o.DisableAutoMTLS) }},
	{"ingressClass", func(o *Options) string { return o.Ingress.Class }},
	{"ingressControllerMode", func(o *Options) string { return string(o.Ingress.Mode) }},
	{"ingressService", func(o *Options) string { return o.Ingress.Service.String() }},
	{"ingressSelector", func(o *Options) string { return formatLabels(o.Ingress.Selector) }},
}

// watchMeshConfig re-reads the mesh config file after each change of its
// directory (a mounted ConfigMap changes by a symlink swap), logs every
// setting that changed, old and new value, and applies them: the next push
// context is built with them (a full push), and the Ingress status writer
// follows the new ownership and gateway Service. A file that does not load
// is logged and changes nothing.
func (s *Server) watchMeshConfig(ctx context.Context) {
	file := s.opts.meshConfig
	log := s.log.With("file", file.path)
	last := s.opts
	reload := func() {
		next := file.base
		if err := next.applyMeshConfig(file.path, file.explicit); err != nil {
			log.Error("mesh config not reloaded; the settings in use stay", "err", err)
			return
		}
		changed := false
		for _, setting := range meshSettings {
			if old, cur := setting.value(&last), setting.value(&next); old != cur {
				log.Info("mesh config setting changed", "setting", setting.name, "old", old, "new", cur)
				changed = true
			}
		}
		if !changed {
			return
		}
		s.xds.SetPushContextOptions(pushContextOptions(&next))
		if s.writeBack.status != nil {
			s.writeBack.status.SetTarget(ingressOwnership(&next), next.Ingress.Service)
		}
		last = next
	}
	err := dirwatch.Watch(ctx, filepath.Dir(file.path), reload, func(err error) {
		log.Warn("mesh config watch error", "err", err)
	})
	if err != nil {
		// Serving goes on with the settings read at start.
		log.Error("mesh config not watched; its changes are not noticed", "err", err)
	}
}

func formatLabels(labels map[string]string) string {
	pairs := make([]string, 0, len(labels))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		pairs = append(pairs, k+"="+labels[k])
	}
	return strings.Join(pairs, ",")
}
