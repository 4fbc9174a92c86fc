// Package version reports the build's version, set at link time by the
// Makefile and falling back to the module version Go recorded.
package version
