// Package netnstest builds throwaway network namespaces joined by a veth
// pair, for tests and benchmarks of the data plane. It shells out to ip(8)
// and needs root.
package netnstest
