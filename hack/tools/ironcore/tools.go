//go:build tools

// Package tools pins the IronCore servers that the test stack runs.
package tools

import (
	_ "github.com/ironcore-dev/ironcore/cmd/ironcore-apiserver"
	_ "github.com/ironcore-dev/ironcore/cmd/ironcore-controller-manager"
)
