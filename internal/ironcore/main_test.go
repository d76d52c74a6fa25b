package ironcore_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv/apiproxy"
)

// stack is shared by the package's tests: the stack starts once per package.
var stack *testenv.Stack

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	var err error
	stack, err = testenv.Start(context.Background(), testenv.Options{Progress: os.Stderr})
	if err != nil {
		fmt.Fprintf(os.Stderr, "start the test stack: %v\n", err)
		return 1
	}
	defer func() {
		if err := stack.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop the test stack: %v\n", err)
		}
	}()
	return m.Run()
}

// setProxyMode switches the proxy between the clients under test and IronCore until the test
// ends.
func setProxyMode(t *testing.T, mode apiproxy.Mode) {
	t.Helper()
	if err := stack.IronCoreProxy.SetMode(mode); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stack.IronCoreProxy.SetMode(apiproxy.Forward) })
}
