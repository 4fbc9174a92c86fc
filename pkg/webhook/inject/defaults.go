package inject

import (
	"embed"
	"path"
)

// defaultFiles are the canonical injection ConfigMap contents. The pilot
// Helm chart ships the same files (a test keeps them equal).
//
//go:embed defaults/config.yaml defaults/values.json
var defaultFiles embed.FS

// DefaultConfig returns the default "config" file: policy enabled and the
// sidecar template.
func DefaultConfig() []byte { return mustReadDefault("config.yaml") }

// DefaultValues returns the default "values" file (JSON).
func DefaultValues() []byte { return mustReadDefault("values.json") }

func mustReadDefault(name string) []byte {
	data, err := defaultFiles.ReadFile(path.Join("defaults", name))
	if err != nil {
		// The files are embedded at build time; a miss is a build defect.
		panic(err)
	}
	return data
}
