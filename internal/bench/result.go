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
	// Prescheduled Machines were created on the MachinePools, bypassing IronCore's scheduler.
	Prescheduled bool `json:"prescheduledMachines"`
	// Flags are the benchmark's flags, and Version the version of the build that ran it.
	Flags   []string `json:"flags,omitempty"`
	Version string   `json:"version,omitempty"`
	// Unfinished counts what was not done when the run's deadline came; nil if it converged.
	Unfinished *Unfinished `json:"unfinished,omitempty"`

	StackStartup        Seconds `json:"stackStartupSeconds"`
	MachineProvisioning Seconds `json:"machineProvisioningSeconds"`
	// Floor is how long IronCore alone took to give as many LoadBalancers as there are
	// Services an address, created at once before the CCM started.
	Floor Timings `json:"loadBalancerFloor"`
	// BurstFloor is IronCore's own pace for as many LoadBalancers while the burst's
	// NetworkInterfaces get their labels, measured in the same run before the CCM started.
	BurstFloor BurstFloor `json:"burstFloor"`
	// Convergence is from the start of the burst until every Node, Service, route and load
	// balancer routing is done.
	Convergence           Seconds `json:"convergenceSeconds"`
	NodeInitialization    Timings `json:"nodeInitialization"`
	LoadBalancerReadiness Timings `json:"loadBalancerReadiness"`
	// LoadBalancerTaken, LoadBalancerCreated and LoadBalancerAddress split a Service's address
	// time: from its creation until the upstream service controller takes it (its cleanup
	// finalizer, put on before the CCM is asked for a load balancer), until its IronCore
	// LoadBalancer exists, and until IronCore gave it an address.
	LoadBalancerTaken   Timings `json:"loadBalancerTaken"`
	LoadBalancerCreated Timings `json:"loadBalancerCreated"`
	LoadBalancerAddress Timings `json:"loadBalancerAddress"`
	// AddressOverFloor compares the Services' address times with the floor's.
	AddressOverFloor Ratio   `json:"addressOverFloor"`
	RouteConvergence Timings `json:"routeConvergence"`
	// RoutingComplete is from Service creation until its LoadBalancerRouting reaches every Node.
	RoutingComplete Timings `json:"routingComplete"`
	// EligibleToRouted is, per Service, the longest its routing took to hold a Node once the
	// Node was eligible (initialized and Ready) and the Service existed; RoutedBeforeEligible
	// counts the destinations held before their Node was eligible.
	EligibleToRouted     Timings `json:"eligibleToRouted"`
	RoutedBeforeEligible int     `json:"routedBeforeEligible"`
	ReadyBeforeRouted    Lag     `json:"readyBeforeRouted"`
	// FirstDestination is from Service creation until its routing reaches a Node, and
	// FirstTraffic until it also has an address: the moment its traffic can flow.
	FirstDestination Timings `json:"firstDestination"`
	FirstTraffic     Timings `json:"firstTraffic"`
	// FirstTrafficOverFloor compares FirstTraffic with the burst floor's.
	FirstTrafficOverFloor Ratio `json:"firstTrafficOverFloor"`
	// AddressWithoutDestination sums up the stretches in which a Service showed an address
	// while its routing reached no Node.
	AddressWithoutDestination Nowhere       `json:"addressWithoutDestination"`
	Requests                  Requests      `json:"ironcoreRequests"`
	Warnings                  WarningEvents `json:"warningEvents"`
	// Recovery times the Services created when an IronCore outage ends; nil without one.
	Recovery *Recovery `json:"recovery,omitempty"`
	CCM      Usage     `json:"ccm"`
}

// Unfinished counts the burst's objects that were not done at the run's deadline.
type Unfinished struct {
	Nodes              int `json:"nodesNotInitialized"`
	Addresses          int `json:"servicesWithoutAddress"`
	Routes             int `json:"nodesWithoutRoute"`
	WithoutDestination int `json:"routingsWithoutDestination"`
	Incomplete         int `json:"routingsIncomplete"`
}

// Recovery is how Services created right after an IronCore outage fared.
type Recovery struct {
	OutageSeconds Seconds `json:"outageSeconds"`
	// Address and FirstTraffic are from each Service's creation, when the outage ended.
	Address      Timings `json:"address"`
	FirstTraffic Timings `json:"firstTraffic"`
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

// Ratio is how many times longer the Services took than the floor, at the median and the
// maximum; zero when the floor is empty.
type Ratio struct {
	P50 float64 `json:"p50"`
	Max float64 `json:"max"`
}

func newRatio(services, floor Timings) Ratio {
	return Ratio{P50: ratio(services.P50, floor.P50), Max: ratio(services.Max, floor.Max)}
}

// ratio is a/b rounded to hundredths, or zero if b is.
func ratio(a, b Seconds) float64 {
	if b == 0 {
		return 0
	}
	return math.Round(float64(a)/float64(b)*100) / 100
}

// Lag is how early Services were reported ready, with an address, before their traffic could
// reach every Node: the Services whose routing was complete only after their address was set,
// and the longest such wait (zero if every routing was complete first).
type Lag struct {
	Services int     `json:"services"`
	Max      Seconds `json:"maxSeconds"`
}

// readinessLag compares, by Service, when it got its address (ready) with when its routing
// reached every Node (routed). Services missing from either are left out.
func readinessLag(ready, routed map[string]time.Time) Lag {
	var lag Lag
	for name, routedAt := range routed {
		readyAt, ok := ready[name]
		if !ok || !routedAt.After(readyAt) {
			continue
		}
		lag.Services++
		lag.Max = max(lag.Max, newSeconds(routedAt.Sub(readyAt)))
	}
	return lag
}

// nowhereTolerance is how long a Service may show an address that leads nowhere before the
// stretch counts as longer than tolerable.
const nowhereTolerance = 2 * time.Second

// Nowhere sums up the stretches in which Services showed an address while their routing
// reached no Node: how many Services had one, how many had one longer than nowhereTolerance,
// and the longest.
type Nowhere struct {
	Services int     `json:"services"`
	Longer   int     `json:"longerThan2s"`
	Max      Seconds `json:"maxSeconds"`
}

// Requests are the CCM's IronCore API requests, counted by the proxy in front of IronCore.
type Requests struct {
	Convergence []RequestCount `json:"convergence"`
	// WritesPerNode are the writes on Machines and NetworkInterfaces during convergence per
	// Node, and RequestsPerService all requests on LoadBalancers and their routings per Service.
	WritesPerNode      float64        `json:"writesPerNode"`
	RequestsPerService float64        `json:"requestsPerService"`
	Idle               []RequestCount `json:"idle"`
	IdleSeconds        float64        `json:"idleSeconds"`
	// LastWrite is from convergence until the CCM's last IronCore write in the run (negative
	// if it came before), and WritesAfterConvergence how many came after.
	LastWrite              Seconds `json:"lastWriteAfterConvergenceSeconds"`
	WritesAfterConvergence int     `json:"writesAfterConvergence"`
	// Target are the CCM's requests to the target cluster during convergence.
	Target []RequestCount `json:"targetConvergence"`
	// RoutingWrites and RoutingBytes are the CCM's writes of LoadBalancerRoutings during
	// convergence and the bytes of their bodies; RoutingBytesPerNode divides the bytes among
	// the burst's Nodes: what each joining Node cost in routing writes.
	RoutingWrites       int     `json:"routingWrites"`
	RoutingBytes        int64   `json:"routingBytes"`
	RoutingBytesPerNode float64 `json:"routingBytesPerNode"`
	// FullRoutingWrites are the routing writes of more than smallRouting bytes: all but the
	// small first routings of a few Nodes. Zero in runs recorded before they were counted.
	FullRoutingWrites int `json:"fullRoutingWrites,omitempty"`
	// StatusWrites are the CCM's writes of Services' status during convergence: of the
	// status subresource's writes, those that set the status, not the service controller's
	// patches that only add its finalizer. Zero in runs recorded before they were told apart.
	StatusWrites int `json:"serviceStatusWrites,omitempty"`
	// FinalizerPatches are the status subresource's writes that set metadata only.
	FinalizerPatches int `json:"finalizerPatches,omitempty"`
}

// statusWrites sorts the writes of Services' status subresource into status writes and patches
// that only add a finalizer (or set other metadata); a body whose fields are unknown counts as
// a status write.
func (r *Requests) statusWrites(writes []apiproxy.Write) {
	for _, write := range writes {
		if write.Resource != "services/status" {
			continue
		}
		if write.Fields != nil && !slices.Contains(write.Fields, "status") {
			r.FinalizerPatches++
			continue
		}
		r.StatusWrites++
	}
}

// perRouting is the routing writes per Service's routing, and perService the status writes per
// Service; in runs recorded before status writes were told apart, every write of the status
// subresource, with estimated true.
func (r *Result) perRouting() float64 { return perObject(r.Requests.RoutingWrites, r.Services) }

func (r *Result) perService() (writes float64, estimated bool) {
	if r.Requests.StatusWrites > 0 || r.Requests.FinalizerPatches > 0 {
		return perObject(r.Requests.StatusWrites, r.Services), false
	}
	for _, c := range r.Requests.Target {
		if c.Resource == "services/status" && isWrite(c.Verb) {
			writes += float64(c.Count)
		}
	}
	return perObject(int(writes), r.Services), true
}

// smallRouting is the most bytes a routing of a Service's first few Nodes takes (some 150 per
// destination, and its metadata); the bench's routings of every Node take ten times that and more.
const smallRouting = 4 << 10

// routingVolume sums up the writes of LoadBalancerRoutings and their bytes.
func (r *Requests) routingVolume(writes []apiproxy.Write, nodes int) {
	for _, write := range writes {
		if strings.HasPrefix(write.Resource, "loadbalancerroutings.") {
			r.RoutingWrites++
			r.RoutingBytes += write.Bytes
			if write.Bytes > smallRouting {
				r.FullRoutingWrites++
			}
		}
	}
	if nodes > 0 {
		r.RoutingBytesPerNode = math.Round(float64(r.RoutingBytes)/float64(nodes)*10) / 10
	}
}

// attribute divides the convergence requests among the burst's objects: the writes on
// Machines and NetworkInterfaces among the Nodes, all requests on LoadBalancers and their
// routings among the Services.
func (r *Requests) attribute(nodes, services int) {
	r.WritesPerNode = perObject(totalOn(r.Convergence, []string{"machines", "networkinterfaces"}, true), nodes)
	r.RequestsPerService = perObject(totalOn(r.Convergence, []string{"loadbalancers", "loadbalancerroutings"}, false), services)
}

// lastWrites records when the last of the writes came, from convergence, and how many came
// after it.
func (r *Requests) lastWrites(writes []apiproxy.Write, converged time.Time) {
	if len(writes) == 0 {
		return
	}
	last := writes[0].At
	for _, write := range writes {
		last = later(last, write.At)
		if write.At.After(converged) {
			r.WritesAfterConvergence++
		}
	}
	r.LastWrite = newSeconds(last.Sub(converged))
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
	return totalOn(counts, nil, writesOnly)
}

// totalOn sums the counts on the given resources (by plural name, any group or subresource;
// nil means all), all of them or only writes.
func totalOn(counts []RequestCount, resources []string, writesOnly bool) int {
	n := 0
	for _, c := range counts {
		if writesOnly && !isWrite(c.Verb) {
			continue
		}
		if resources != nil && !slices.Contains(resources, pluralName(c.Resource)) {
			continue
		}
		n += c.Count
	}
	return n
}

// perObject divides a count among objects, rounded to hundredths; zero for no objects.
func perObject(count, objects int) float64 {
	if objects == 0 {
		return 0
	}
	return math.Round(float64(count)/float64(objects)*100) / 100
}

// isWrite tells writes from reads; requests that are not for resources ("GET /api") count
// as reads.
func isWrite(verb string) bool {
	return !slices.Contains([]string{"get", "list", "watch", "GET"}, verb)
}

// pluralName is the resource of a counted request without its group and subresource:
// "machines.compute.ironcore.dev/status" is "machines".
func pluralName(resource string) string {
	resource, _, _ = strings.Cut(resource, "/")
	resource, _, _ = strings.Cut(resource, ".")
	return resource
}

// WarningEvents are the target cluster's Warning events about the burst's Nodes and Services,
// counted after convergence.
type WarningEvents struct {
	// Events is how many Event objects there are, and Occurrences how often they happened:
	// the event recorder folds repeats of an event into one object.
	Events      int           `json:"events"`
	Occurrences int           `json:"occurrences"`
	ByReason    []ReasonCount `json:"byReason"`
}

// ReasonCount sums the Warning events of one reason on one kind of object.
type ReasonCount struct {
	Kind        string `json:"kind"`
	Reason      string `json:"reason"`
	Objects     int    `json:"objects"`
	Events      int    `json:"events"`
	Occurrences int    `json:"occurrences"`
}

// Usage is the CCM process's resource use over the whole run.
type Usage struct {
	PeakRSSMiB float64 `json:"peakRSSMiB"`
	// PeakAnonMiB and PeakFileMiB are the highest anonymous (heap, stacks) and file-backed
	// (the binary's pages) resident memory, sampled every 100 ms.
	PeakAnonMiB float64 `json:"peakAnonMiB"`
	PeakFileMiB float64 `json:"peakFileMiB"`
	CPUSeconds  float64 `json:"cpuSeconds"`
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
		Latency: newSeconds(opts.Latency), NodeSyncPeriod: newSeconds(opts.NodeSyncPeriod), Prescheduled: opts.Prescheduled,
		Flags: opts.Flags, Version: opts.Version,
	}
}
