package ironcore_test

import (
	"context"
	"os"
	"testing"
	"time"

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

// waitCached waits until read, one of the client's cached readers, finds the named object.
func waitCached[T any](t *testing.T, ctx context.Context, what string, read func(context.Context, string) (T, error), name string) {
	t.Helper()
	testenv.Await(t, ctx, time.Minute, what+" in the cache", func(ctx context.Context) error {
		_, err := read(ctx, name)
		return err
	})
}
