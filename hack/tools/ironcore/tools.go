//go:build tools

// Package tools pins the IronCore API server and controller manager the test stack runs. IronCore
// v0.5.0's API server compiles only against the Kubernetes v0.35 libraries, so it has a module of its
// own; every other module it shares with the CCM is at the CCM's version (internal/testenv checks it).
package tools

import (
	_ "github.com/ironcore-dev/ironcore/cmd/ironcore-apiserver"
	_ "github.com/ironcore-dev/ironcore/cmd/ironcore-controller-manager"
)
