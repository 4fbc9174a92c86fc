package controllers

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
)

// BuiltinKindsConfig returns a copy of cfg for a clientset of Kubernetes'
// built-in kinds that reads and writes protobuf, as the kubelet and the
// controller manager do, instead of client-go's default JSON.
//
// Decoding is most of what an informer costs the process: a restart on a
// populated cluster lists every Service, EndpointSlice and Pod, and every
// endpoint change arrives as a whole EndpointSlice, which JSON decodes
// several times slower than protobuf. JSON stays acceptable, for an API
// server or proxy that cannot answer in protobuf.
//
// Custom resources (Istio's kinds) have no protobuf encoding: their
// clients keep cfg as it is.
func BuiltinKindsConfig(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return c
}
