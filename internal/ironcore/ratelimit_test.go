package ironcore

import (
	"context"
	"slices"
	"sync"
	"testing"
)

// TestUrgentRequestsGoAheadOfBulkOnes queues bulk requests behind an empty bucket, then one
// urgent request, and expects the urgent one to get one of the next tokens rather than to wait
// behind every bulk request.
func TestUrgentRequestsGoAheadOfBulkOnes(t *testing.T) {
	const bulk = 10
	limiter := newPriorityLimiter(50, 1)
	if !limiter.TryAccept() {
		t.Fatal("a new bucket has no token")
	}
	var mu sync.Mutex
	var order []string
	acquire := func(ctx context.Context, name string) {
		if err := limiter.Wait(ctx); err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		order = append(order, name)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	started := make(chan struct{}, bulk)
	for range bulk {
		wg.Go(func() {
			started <- struct{}{}
			acquire(context.Background(), "bulk")
		})
	}
	for range bulk {
		<-started
	}
	wg.Go(func() { acquire(urgent(context.Background()), "urgent") })
	wg.Wait()
	if position := slices.Index(order, "urgent"); position > 2 {
		t.Fatalf("the urgent request got token %d of %d: %v", position+1, len(order), order)
	}
}
