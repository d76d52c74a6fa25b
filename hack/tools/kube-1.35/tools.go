//go:build tools

// Package tools pins the Kubernetes 1.35 API server that `make test-compat` runs the target
// cluster of the end-to-end smoke tests on (internal/testenv/compat.go).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
