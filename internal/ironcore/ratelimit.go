package ironcore

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/util/flowcontrol"
)

type urgentKey struct{}

// urgent marks the requests made with ctx as a Service's load balancer work, which goes ahead
// of bulk work (Node labels, route prefixes) in the one request budget.
func urgent(ctx context.Context) context.Context {
	return context.WithValue(ctx, urgentKey{}, true)
}

func isUrgent(ctx context.Context) bool {
	marked, _ := ctx.Value(urgentKey{}).(bool)
	return marked
}

// bulkAging is how long a bulk request gives way to urgent ones before it reserves its token as
// they do: under sustained Service traffic, bulk work must still get written.
const bulkAging = 2 * time.Second

// priorityLimiter is the process's one token bucket, in which urgent requests go first: they
// reserve the next token, while a bulk request takes one only when it is free now, so bulk work
// never stands between a Service and its LoadBalancer. Bulk requests queue on bulkMu, so only
// one at a time watches the bucket.
type priorityLimiter struct {
	limiter *rate.Limiter
	aging   time.Duration
	bulkMu  sync.Mutex
}

var _ flowcontrol.RateLimiter = (*priorityLimiter)(nil)

func newPriorityLimiter(qps float32, burst int) *priorityLimiter {
	return &priorityLimiter{limiter: rate.NewLimiter(rate.Limit(qps), burst), aging: bulkAging}
}

// Wait blocks until the request may be made, or ctx ends.
func (l *priorityLimiter) Wait(ctx context.Context) error {
	if isUrgent(ctx) {
		return l.limiter.Wait(ctx)
	}
	l.bulkMu.Lock()
	defer l.bulkMu.Unlock()
	aged := time.Now().Add(l.aging)
	for {
		if l.limiter.Allow() {
			return nil
		}
		if !time.Now().Before(aged) {
			return l.limiter.Wait(ctx)
		}
		// Look again when the bucket will next hold a whole token.
		missing := 1 - l.limiter.Tokens()
		delay := time.Duration(missing / float64(l.limiter.Limit()) * float64(time.Second))
		timer := time.NewTimer(max(delay, time.Millisecond))
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
		}
	}
}

// TryAccept takes a token if one is free now.
func (l *priorityLimiter) TryAccept() bool { return l.limiter.Allow() }

// Accept waits for a token as bulk work.
func (l *priorityLimiter) Accept() { _ = l.Wait(context.Background()) }

// Stop does nothing: the limiter holds no goroutines.
func (l *priorityLimiter) Stop() {}

// QPS is the bucket's rate.
func (l *priorityLimiter) QPS() float32 { return float32(l.limiter.Limit()) }
