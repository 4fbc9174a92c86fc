// Package wdsgen generates workload discovery (WDS) for node proxies: the
// istio.workload.Address resources that tell a node proxy every workload
// (Pod) with an address, who it is, whether it takes HBONE, and which
// services select it, and every service with its VIPs and ports. It also
// answers istio.security.Authorization, empty until policies exist.
//
// Each Address is built and marshalled once per change, not per proxy or
// per push: a push context's set of Addresses reuses the marshalled
// resource of every workload and service whose inputs did not change, so a
// Pod churn costs one marshal, and the server's per-resource versions turn
// it into a delta of exactly that Address.
package wdsgen
