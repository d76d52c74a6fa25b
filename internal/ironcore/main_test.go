package ironcore_test

import (
	"os"
	"testing"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv/apiproxy"
)

// stack is shared by the package's tests: the stack starts once per package.
var stack *testenv.Stack

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, &stack))
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
