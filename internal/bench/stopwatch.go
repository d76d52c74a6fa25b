package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"
)

// stopwatch records when each keyed object was created and when it was first seen done, and
// signals when a given number of keys are done. Keys are "<kind>/<name>".
type stopwatch struct {
	mu       sync.Mutex
	started  map[string]time.Time
	finished map[string]time.Time
	want     int
	allDone  chan struct{}
	fired    bool
}

func newStopwatch(want int) *stopwatch {
	s := &stopwatch{started: map[string]time.Time{}, finished: map[string]time.Time{}, want: want, allDone: make(chan struct{})}
	if want == 0 {
		s.fired = true
		close(s.allDone)
	}
	return s
}

// created starts the key's clock.
func (s *stopwatch) created(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.started[key] = time.Now()
}

// expect starts the keys' clocks now and has the next wait wait for them too.
func (s *stopwatch) expect(keys ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for _, key := range keys {
		s.started[key] = now
	}
	s.want += len(keys)
	if s.fired {
		s.fired, s.allDone = false, make(chan struct{})
	}
}

// done stops the key's clock now.
func (s *stopwatch) done(key string) { s.doneAt(key, time.Now()) }

// doneAt stops the key's clock at the given time, once. Keys that were not created are
// ignored: they are not this run's objects.
func (s *stopwatch) doneAt(key string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, seen := s.finished[key]; seen {
		return
	}
	if _, created := s.started[key]; !created {
		return
	}
	s.finished[key] = at
	if len(s.finished) == s.want && !s.fired {
		s.fired = true
		close(s.allDone)
	}
}

// wait blocks until every wanted key is done, writing progress() every ten seconds, and fails
// if that takes longer than timeout.
func (s *stopwatch) wait(ctx context.Context, timeout time.Duration, out io.Writer, progress func() string) error {
	done, err := s.waitAtMost(ctx, timeout, out, progress)
	if err == nil && !done {
		return fmt.Errorf("not done after %s: %s", timeout, progress())
	}
	return err
}

// waitAtMost is wait that reports whether everything was done when timeout came, instead of
// failing.
func (s *stopwatch) waitAtMost(ctx context.Context, timeout time.Duration, out io.Writer, progress func() string) (bool, error) {
	deadline := time.After(timeout)
	ticker := time.NewTicker(10 * time.Second)
	defer ticker.Stop()
	s.mu.Lock()
	allDone := s.allDone
	s.mu.Unlock()
	for {
		select {
		case <-allDone:
			return true, nil
		case <-ctx.Done():
			return false, ctx.Err()
		case <-deadline:
			return false, nil
		case <-ticker.C:
			fmt.Fprintf(out, "  %s\n", progress())
		}
	}
}

// count is how many keys with the prefix are done.
func (s *stopwatch) count(prefix string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for key := range s.finished {
		if strings.HasPrefix(key, prefix) {
			n++
		}
	}
	return n
}

// durations returns, for the done keys with the prefix, the time each took from creation to
// done, shortest first.
func (s *stopwatch) durations(prefix string) []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var durations []time.Duration
	for key, done := range s.finished {
		if strings.HasPrefix(key, prefix) {
			durations = append(durations, done.Sub(s.started[key]))
		}
	}
	slices.Sort(durations)
	return durations
}

// doneTimes returns when each done key with the prefix was done, by the key without it.
func (s *stopwatch) doneTimes(prefix string) map[string]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return byName(s.finished, prefix)
}

// startTimes returns when each key with the prefix was created, by the key without it.
func (s *stopwatch) startTimes(prefix string) map[string]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return byName(s.started, prefix)
}

// byName returns the times of the keys with the prefix, by the key without it.
func byName(times map[string]time.Time, prefix string) map[string]time.Time {
	named := map[string]time.Time{}
	for key, at := range times {
		if name, ok := strings.CutPrefix(key, prefix); ok {
			named[name] = at
		}
	}
	return named
}
