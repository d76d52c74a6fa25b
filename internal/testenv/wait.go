package testenv

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// PollInterval is how often WaitFor checks its condition.
const PollInterval = 100 * time.Millisecond

// WaitFor checks condition until it returns nil, the timeout passes, or ctx ends. On timeout
// the error names what was awaited and the condition's last complaint.
func WaitFor(ctx context.Context, timeout time.Duration, what string, condition func(context.Context) error) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, PollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		err := condition(ctx)
		// A check cut short by the deadline (or by a rate limiter that foresaw it) says less
		// than the one before it.
		if err == nil || last == nil || (ctx.Err() == nil && !strings.Contains(err.Error(), "would exceed context deadline")) {
			last = err
		}
		return err == nil, nil
	})
	switch {
	case err == nil:
		return nil
	case last == nil:
		return fmt.Errorf("waiting %s for %s: %w", timeout, what, err)
	default:
		return fmt.Errorf("waiting %s for %s: %w (last: %w)", timeout, what, err, last)
	}
}

// Await is WaitFor that fails the test if condition does not pass in time.
func Await(t testing.TB, ctx context.Context, timeout time.Duration, what string, condition func(context.Context) error) {
	t.Helper()
	if err := WaitFor(ctx, timeout, what, condition); err != nil {
		t.Fatal(err)
	}
}
