//go:build tools

// Package tools pins the Kubernetes servers that the test stack runs.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
