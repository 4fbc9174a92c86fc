// Package membership decides which pods ambient mode captures, by Istio's
// rule. The CNI plugin asks it when a sandbox is added, and the node agent
// asks it again whenever a running pod's or its namespace's labels change,
// so that both enrol the same pods.
package membership
