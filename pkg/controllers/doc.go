// Package controllers connects the control plane to the outside world. Two
// sources, Kubernetes informers (KubeSource) and a directory of YAML files
// (FileSource), feed typed Kubernetes objects into one Ingester, which
// converts them to model types and fills the model.Store; because both
// share it, nothing downstream can tell the sources apart. On the write
// side, the Ingress status writer and the Ingress problem reporter write
// back to the API, behind Lease leader election.
package controllers
