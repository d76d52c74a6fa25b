package testenv

import (
	"context"
	"fmt"
	"os"
	"testing"
)

// Main is a TestMain body for a package whose tests share one stack: it starts the stack into
// *stack, runs the tests and stops it, and returns the exit code.
func Main(m *testing.M, stack **Stack) int {
	started, err := Start(context.Background(), Options{Progress: os.Stderr})
	if err != nil {
		fmt.Fprintf(os.Stderr, "start the test stack: %v\n", err)
		return 1
	}
	defer func() { _ = started.Stop() }()
	*stack = started
	return m.Run()
}
