// Package manifests holds the Kubernetes manifests for running the control plane replicated
// (deploy/manifests/*.yaml). Its tests check the manifests' references against each other and
// against docs/configuration.md, and run two apiserver replicas on one database to show that
// what the manifests rely on (stateless replicas behind a load balancer) holds.
package manifests
