// Package httproute translates the HTTP routes of a VirtualService into xDS
// routes for one service port, for both kinds of client meshpilot serves
// routes to: Envoy sidecars and proxyless gRPC. The two accept different
// subsets of the route API (gRPC has no redirects, rewrites or header
// edits, and knows only gRPC status names in retry conditions), so the
// translation is one code path with a flavour that says what to drop; every
// drop is reported against the VirtualService, never silent.
package httproute
