//go:build tools

// Package tools pins the servers the test stack runs besides IronCore's: etcd and the Kubernetes API
// server and controller manager, of the Kubernetes version whose libraries the CCM is built on. They
// share every module version with the CCM (internal/testenv checks it), so a first run compiles the
// packages they share once.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
