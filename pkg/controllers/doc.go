// Package controllers fills the model.Store from the outside world. Two
// sources, Kubernetes informers (KubeSource) and a directory of YAML files
// (FileSource), feed typed Kubernetes objects into one Ingester, which
// converts them to model types. Because both share it, nothing downstream
// can tell the sources apart.
package controllers
