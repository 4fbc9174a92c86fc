// Package xds is meshpilot's ADS server: it serves state-of-the-world and
// delta xDS streams, tracks what every connection subscribed to, was sent,
// ACKed and NACKed, debounces config changes into pushes, and feeds each
// connection through its own coalescing queue. A push reaches only the types,
// and the proxies, that its changes can affect, and identical proxies share
// one generation per type and served version. What is sent is decided by
// Generators (one per type URL), which live in subpackages.
package xds
