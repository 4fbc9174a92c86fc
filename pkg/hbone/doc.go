// Package hbone speaks HBONE, Istio ambient mode's tunnel: mutual TLS 1.3
// (ALPN "h2") carrying HTTP/2, with one CONNECT stream per application
// connection and ":authority" set to the destination "ip:port".
//
// Its one job is the protocol: a Server that terminates tunnels and relays
// each to its destination, and a Dialer that opens tunnels over pooled
// HTTP/2 connections. Which certificate to serve, which destinations are
// allowed and how to reach them are the caller's decisions, given as
// callbacks; nothing here knows Kubernetes or xDS.
//
// Half-close is carried both ways: the source's END_STREAM becomes a FIN
// toward the destination, and the destination's FIN becomes END_STREAM on
// the response, each while the other direction goes on; a tunnel ends when
// both have. The Server speaks HTTP/2 itself (h2conn.go says why) so that
// it can end a response while still reading the request. TestHalfClose
// holds both directions to this with Go's own HTTP/2 client.
package hbone
