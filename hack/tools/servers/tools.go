//go:build tools

// Package tools pins the servers the test stack runs: etcd, the Kubernetes API server and
// controller manager, and IronCore's API server and controller manager. One module for all of
// them has them share one version of every common dependency, so that a package they share is
// compiled once.
package tools

import (
	_ "github.com/ironcore-dev/ironcore/cmd/ironcore-apiserver"
	_ "github.com/ironcore-dev/ironcore/cmd/ironcore-controller-manager"
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
