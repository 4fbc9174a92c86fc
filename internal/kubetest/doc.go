// Package kubetest starts a real kube-apiserver and etcd (controller-runtime
// envtest) for integration tests, with meshpilot's CRDs installed, and hands
// out clients and a fresh namespace per test.
package kubetest
