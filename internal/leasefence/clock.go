package leasefence

import "time"

// reading is the time by each of the machine's clocks at one moment.
type reading struct {
	// mono is the monotonic clock's time since the process started.
	mono time.Duration
	// wall is the wall clock's time, without a monotonic reading.
	wall time.Time
	// boot is the time since the machine booted, suspensions included; zero where unknown.
	boot time.Duration
}

// newClock returns the machine's clocks, read together.
func newClock() func() reading {
	start := time.Now()
	return func() reading {
		now := time.Now()
		return reading{mono: now.Sub(start), wall: now.Round(0), boot: bootTime()}
	}
}

// since is the time from earlier to r by the clock that counts the most: a clock that stood
// still through a pause must not make the pause look short.
func (r reading) since(earlier reading) time.Duration {
	elapsed := r.mono - earlier.mono
	if wall := r.wall.Sub(earlier.wall); wall > elapsed {
		elapsed = wall
	}
	if r.boot != 0 && earlier.boot != 0 && r.boot-earlier.boot > elapsed {
		elapsed = r.boot - earlier.boot
	}
	return elapsed
}
