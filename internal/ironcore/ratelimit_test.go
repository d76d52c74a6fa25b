package ironcore

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestUrgentRequestsGoAheadOfBulkOnes queues bulk requests behind an empty bucket, then one
// urgent request, and expects the urgent one to get one of the next tokens rather than to wait
// behind every bulk request.
func TestUrgentRequestsGoAheadOfBulkOnes(t *testing.T) {
	// A token every 200 ms: the urgent request, queued after the bulk ones, must reach the
	// limiter before two of them have their tokens, which a loaded machine still does in
	// 400 ms. Six bulk requests stay within bulkAging.
	const bulk = 6
	limiter := newPriorityLimiter(5, 1)
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

// TestBulkRequestsAgeIntoTheQueue keeps the bucket reserved by urgent requests without pause
// and expects a bulk request to get its token all the same once it has given way for its
// aging period: without aging it would wait as long as Service traffic lasts.
func TestBulkRequestsAgeIntoTheQueue(t *testing.T) {
	limiter := newPriorityLimiter(1000, 1)
	limiter.aging = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	// Each urgent requester reserves its next token as soon as it has the last: with many of
	// them, the bucket stays reserved ahead and never holds a free token for the bulk request.
	for range 16 {
		wg.Go(func() {
			for limiter.Wait(urgent(ctx)) == nil {
			}
		})
	}
	for limiter.limiter.Tokens() > -8 {
		runtime.Gosched()
	}
	bulkCtx, bulkCancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer bulkCancel()
	if err := limiter.Wait(bulkCtx); err != nil {
		t.Fatalf("a bulk request never got a token under sustained urgent traffic: %v", err)
	}
}
