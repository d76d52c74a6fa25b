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
	return Run(stack, m.Run)
}

// Run starts the stack into *stack, calls run (a TestMain that prepares more before it runs
// the tests), stops the stack and returns run's exit code, or 1 if the stack did not start.
func Run(stack **Stack, run func() int) int {
	started, err := Start(context.Background(), Options{Progress: os.Stderr})
	if err != nil {
		fmt.Fprintf(os.Stderr, "start the test stack: %v\n", err)
		return 1
	}
	defer func() {
		if err := started.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop the test stack: %v\n", err)
		}
	}()
	*stack = started
	return run()
}
