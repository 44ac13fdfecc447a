// Package kubernetes holds cacheagent's Kubernetes manifests for fleet
// mode (kubectl apply -k deploy/kubernetes; docs/operations.md, "Fleet mode
// on Kubernetes") and, in its tests, their checks: every manifest decodes
// strictly into the k8s.io/api types, and the DaemonSet, the headless
// Service and the agents' config agree with each other and with the daemon's
// config loader. It has no Go code of its own.
package kubernetes
