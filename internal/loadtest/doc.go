// Package loadtest is the library behind `pilot load`: it puts a mesh of a
// chosen size in front of a running control plane (inputs.go), connects many
// cheap xDS clients that behave as Envoy sidecars, routers and proxyless
// gRPC clients do (client*.go, skim.go), drives the measured phases (connect
// storm, endpoint churn, config churn, reconnect after a restart;
// phases.go), samples the control plane's and its own CPU and memory
// (sampling.go, controlplane.go) and reports the distributions as a table
// or JSON (report.go).
//
// The clients must cost less than the control plane they measure: a
// standard-scenario CDS response is megabytes, and fully unmarshalling it
// for 50 clients on two cores would measure the tool. They skim responses
// with protowire instead (type URL, version, nonce, resource names, what a
// cluster or listener depends on) and decode only the few bytes a phase
// checks, such as the addresses of the one load assignment that changed.
package loadtest
