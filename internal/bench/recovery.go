package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv/apiproxy"
)

// recoveryName names the Services created when an outage ends; their stopwatch keys share the
// prefix, apart from the burst's.
func recoveryName(i int) string { return fmt.Sprintf("recovery-%03d", i) }

// measureRecovery makes IronCore unreachable for the CCM (its proxy stops listening and drops
// open connections) for outage, then creates RecoveryServices Services at once and times each
// to its address and its first traffic. What a CCM keeps from the outage (watches in backoff,
// keys waiting out their retry delay) shows here, on a cluster that is otherwise settled.
func measureRecovery(ctx context.Context, stack *testenv.Stack, tracker *tracker, outage time.Duration, out io.Writer) (*Recovery, error) {
	fmt.Fprintf(out, "recovery: IronCore unreachable for %s, then %d new Services...\n", outage, RecoveryServices)
	if err := stack.IronCoreProxy.SetMode(apiproxy.Down); err != nil {
		return nil, err
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(outage):
	}
	if err := stack.IronCoreProxy.SetMode(apiproxy.Forward); err != nil {
		return nil, err
	}
	var keys []string
	for i := range RecoveryServices {
		keys = append(keys, serviceKey(recoveryName(i)), lbFirstKey(recoveryName(i)))
	}
	tracker.expect(keys...)
	if err := parallel(RecoveryServices, func(i int) error {
		_, err := stack.CreateLoadBalancerService(ctx, recoveryName(i), testenv.ServiceOptions{})
		return err
	}); err != nil {
		return nil, err
	}
	if err := tracker.wait(ctx, 10*time.Minute, out); err != nil {
		return nil, fmt.Errorf("after the outage: %w", err)
	}
	recovery := &Recovery{
		OutageSeconds: newSeconds(outage),
		Address:       newTimings(tracker.durations(serviceKey("recovery-"))),
		FirstTraffic:  newTimings(firstTraffic(tracker.stopwatch, serviceKey("recovery-"), lbFirstKey("recovery-"))),
	}
	fmt.Fprintf(out, "  address p50 %.3fs, max %.3fs; first traffic p50 %.3fs, max %.3fs\n",
		recovery.Address.P50, recovery.Address.Max, recovery.FirstTraffic.P50, recovery.FirstTraffic.Max)
	return recovery, nil
}
