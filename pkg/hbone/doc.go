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
// Half-close: the source's is carried (END_STREAM becomes a FIN toward the
// destination, which may go on answering). The destination's is not: x/net's
// HTTP/2 server ends a response only when its handler returns, and then
// resets a still-open request with RST_STREAM(NO_ERROR). The source reads
// all the destination sent and then EOF, but the tunnel is over: its later
// writes fail, and the destination's connection is closed. TestHalfClose
// holds both directions to this.
package hbone
