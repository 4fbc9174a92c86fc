// Package bootstrap assembles a running control plane from Options: it opens
// the listeners, starts the config sources, the xDS server and the HTTP
// endpoints, reports readiness, and shuts everything down gracefully. The
// pilot command only turns flags into Options.
package bootstrap
