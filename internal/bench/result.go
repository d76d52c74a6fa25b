package bench

import (
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv/apiproxy"
)

// Seconds is a duration in seconds, rounded to milliseconds.
type Seconds float64

// newSeconds converts a duration.
func newSeconds(d time.Duration) Seconds {
	return Seconds(math.Round(d.Seconds()*1000) / 1000)
}

// Result is everything one run measured.
type Result struct {
	Label   string    `json:"label"`
	Date    time.Time `json:"date"`
	Machine Machine   `json:"machine"`
	// Command is the CCM command line, with its placeholders.
	Command  string  `json:"command"`
	Nodes    int     `json:"nodes"`
	Services int     `json:"services"`
	Latency  Seconds `json:"simulatorLatencySeconds"`
	// NodeSyncPeriod is the --node-status-update-frequency of the default command.
	NodeSyncPeriod Seconds `json:"nodeSyncPeriodSeconds"`

	StackStartup        Seconds `json:"stackStartupSeconds"`
	MachineProvisioning Seconds `json:"machineProvisioningSeconds"`
	// Convergence is from the start of the burst until every Node, Service and route is done.
	Convergence           Seconds  `json:"convergenceSeconds"`
	NodeInitialization    Timings  `json:"nodeInitialization"`
	LoadBalancerReadiness Timings  `json:"loadBalancerReadiness"`
	RouteConvergence      Timings  `json:"routeConvergence"`
	Requests              Requests `json:"ironcoreRequests"`
	CCM                   Usage    `json:"ccm"`
}

// Timings summarize how long each object took, from its creation until it was done.
type Timings struct {
	Count int       `json:"count"`
	P50   Seconds   `json:"p50Seconds"`
	P95   Seconds   `json:"p95Seconds"`
	Max   Seconds   `json:"maxSeconds"`
	All   []Seconds `json:"allSeconds"`
}

func newTimings(sorted []time.Duration) Timings {
	timings := Timings{Count: len(sorted)}
	if len(sorted) == 0 {
		return timings
	}
	quantile := func(q float64) Seconds {
		return newSeconds(sorted[int(math.Ceil(q*float64(len(sorted))))-1])
	}
	timings.P50, timings.P95, timings.Max = quantile(0.5), quantile(0.95), newSeconds(sorted[len(sorted)-1])
	for _, d := range sorted {
		timings.All = append(timings.All, newSeconds(d))
	}
	return timings
}

// Requests are the CCM's IronCore API requests, counted by the proxy in front of IronCore.
type Requests struct {
	Convergence []RequestCount `json:"convergence"`
	Idle        []RequestCount `json:"idle"`
	IdleSeconds float64        `json:"idleSeconds"`
}

// RequestCount is how many requests of one verb on one resource were made, and how many of
// them IronCore refused (conflicts, not found, invalid).
type RequestCount struct {
	Verb     string `json:"verb"`
	Resource string `json:"resource"`
	Count    int    `json:"count"`
	Refused  int    `json:"refused,omitempty"`
}

func counts(proxyCounts []apiproxy.Count) []RequestCount {
	result := make([]RequestCount, 0, len(proxyCounts))
	for _, c := range proxyCounts {
		result = append(result, RequestCount{Verb: c.Verb, Resource: c.Resource, Count: c.N, Refused: c.Refused})
	}
	return result
}

// total sums the counts, all of them or only writes.
func total(counts []RequestCount, writesOnly bool) int {
	n := 0
	for _, c := range counts {
		if !writesOnly || !slices.Contains([]string{"get", "list", "watch"}, c.Verb) {
			n += c.Count
		}
	}
	return n
}

// Usage is the CCM process's resource use over the whole run.
type Usage struct {
	PeakRSSMiB float64 `json:"peakRSSMiB"`
	CPUSeconds float64 `json:"cpuSeconds"`
}

// Machine describes where the run ran.
type Machine struct {
	CPUs      int    `json:"cpus"`
	CPUModel  string `json:"cpuModel"`
	MemoryGiB int    `json:"memoryGiB"`
	Kernel    string `json:"kernel"`
	Go        string `json:"go"`
}

func describeMachine() Machine {
	machine := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if value, ok := strings.CutPrefix(line, "model name"); ok {
				machine.CPUModel = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(value), ":"))
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if value, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				if kib, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(value), " kB")); err == nil {
					machine.MemoryGiB = int(math.Round(float64(kib) / (1 << 20)))
				}
			}
		}
	}
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		machine.Kernel = strings.TrimSpace(string(data))
	}
	return machine
}

func newResult(opts Options) *Result {
	return &Result{
		Label: opts.Label, Date: time.Now().UTC().Truncate(time.Second), Machine: describeMachine(),
		Command: opts.Command, Nodes: opts.Nodes, Services: opts.Services,
		Latency: newSeconds(opts.Latency), NodeSyncPeriod: newSeconds(opts.NodeSyncPeriod),
	}
}
