// Package validation validates Istio configs; one function serves the
// controllers and, later, the validation webhook.
//
// Validators are pure: they read the spec, never mutate it, and report every
// problem they find at once (joined with errors.Join), each prefixed with the
// field path it concerns.
package validation
