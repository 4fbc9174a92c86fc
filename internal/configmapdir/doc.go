// Package configmapdir lays files out as the kubelet mounts a ConfigMap, for
// tests of code that watches such a mount.
package configmapdir
