//go:build !linux

package leasefence

import "time"

// bootTime is unknown outside Linux; the monotonic and wall clocks remain.
func bootTime() time.Duration { return 0 }
