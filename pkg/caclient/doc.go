// Package caclient gets workload certificates from an Istio-compatible CA
// (IstioCertificateService/CreateCertificate): it makes the key and the
// CSR, proves the caller with a ServiceAccount token or its current
// certificate, and may ask, as a node proxy does, for the identity of a
// workload on its node (impersonation). It is the data plane's side of the
// CA and imports nothing of the control plane.
package caclient
