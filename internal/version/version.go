package version

import "runtime/debug"

// Version is overridden with -ldflags "-X .../internal/version.Version=v1.2.3".
var Version = ""

// String returns the version, the module's when built with go install, or "dev".
func String() string {
	if Version != "" {
		return Version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "dev"
}
