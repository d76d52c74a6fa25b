//go:build tools

// Package tools pins the etcd server that the test stack runs.
package tools

import _ "go.etcd.io/etcd/server/v3"
