// Package validation validates Istio configs (DestinationRule,
// PeerAuthentication, VirtualService); one function per kind serves both
// the controllers, which skip what it rejects, and the validation webhook,
// which denies it, so the two always give the same reasons.
//
// Validators are pure: they read the spec, never mutate it, and report every
// problem they find at once (joined with errors.Join), each prefixed with the
// field path it concerns.
package validation
