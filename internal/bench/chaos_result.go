package bench

import (
	"fmt"
	"image/color"
	"maps"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// ChaosResult is what a churn-and-chaos run measured. Problems lists every broken invariant;
// a run passes when it is empty.
type ChaosResult struct {
	Date    time.Time    `json:"date"`
	Machine Machine      `json:"machine"`
	Options ChaosOptions `json:"options"`
	// Command is one replica's CCM flags (besides the stack's kubeconfigs and cloud-config).
	Command         string  `json:"command"`
	DurationSeconds Seconds `json:"durationSeconds"`

	ServicesCreated int `json:"servicesCreated"`
	ServicesEdited  int `json:"servicesEdited"`
	ServicesDeleted int `json:"servicesDeleted"`
	TypeSwitches    int `json:"typeSwitches"`
	PolicySwitches  int `json:"policySwitches"`
	NodesJoined     int `json:"nodesJoined"`
	NodesLeft       int `json:"nodesLeft"`
	SilentPeriods   int `json:"silentPeriods"`
	// FaultsInjected are the IronCore requests failed on purpose, by kind, and
	// TargetFaultsInjected those of the target cluster's API.
	FaultsInjected       map[string]int `json:"faultsInjected"`
	TargetFaultsInjected map[string]int `json:"targetFaultsInjected"`
	Takeovers            []Takeover     `json:"takeovers"`
	// UnplannedExits are replicas that ended by themselves and were restarted.
	UnplannedExits []string `json:"unplannedExits"`

	// ConvergenceSeconds is the time from the end of the chaos until every Service was served
	// right.
	ConvergenceSeconds Seconds `json:"convergenceSeconds"`
	PodCIDRsChecked    int     `json:"podCIDRsChecked"`
	// PodCIDRsAllocated counts the Nodes of the end whose pod CIDR IronCore's IPAM allocated;
	// SharedPodCIDRs, the moments a pod CIDR was on two Nodes of the cluster.
	PodCIDRsAllocated     int `json:"podCIDRsAllocated"`
	SharedPodCIDRs        int `json:"sharedPodCIDRs"`
	WrongfulNodeDeletions int `json:"wrongfulNodeDeletions"`
	// LeftNodesDeleted are the Nodes of deleted Machines the CCM deleted.
	LeftNodesDeleted int `json:"leftNodesDeleted"`
	Duplicates       int `json:"duplicates"`
	// AddressesLost counts the samples in which a Service that had an address showed none.
	AddressesLost int `json:"addressesLost"`
	Leftovers     int `json:"leftovers"`
	// TargetDrops are how long each destination of a Node still there was missing from a
	// routing.
	TargetDrops []Seconds `json:"targetDropsSeconds"`
	// HealthFlaps are the Nodes made unhealthy and healthy again; FlapLeftSeconds how long
	// until every routing that held one had left it, FlapBackSeconds how long after it was
	// healthy until they all held it again.
	HealthFlaps     int       `json:"healthFlaps"`
	FlapLeftSeconds []Seconds `json:"flapLeftSeconds"`
	FlapBackSeconds []Seconds `json:"flapBackSeconds"`
	// LabelRepairSeconds is, per target label removed by hand, how long until the CCM put it
	// back; RoutingRepairSeconds, per destination removed by hand from a Local Service's
	// routing, how long until the CCM put it back.
	LabelRepairSeconds   []Seconds `json:"labelRepairSeconds"`
	RoutingRepairSeconds []Seconds `json:"routingRepairSeconds"`
	// ClusterRoutingRepairSeconds is, per destination removed by hand from the routing of a
	// Service that is not Local (default mode, where the CCM writes it), how long until the
	// CCM put it back.
	ClusterRoutingRepairSeconds []Seconds `json:"clusterRoutingRepairSeconds"`
	// MachineGoneLeftSeconds is, per Machine deleted without draining while its Node was
	// Ready, how long until no routing held it; NICErrorLeftSeconds and NICErrorBackSeconds,
	// per NetworkInterface in Error, until no routing held it and, once Available again,
	// until every routing that had held it did again; NotReadyJoinSeconds, per Node that
	// joined NotReady, how long after it was Ready until every routing held it. Measured with
	// faults off.
	MachineGoneLeftSeconds []Seconds `json:"machineGoneLeftSeconds"`
	NICErrorLeftSeconds    []Seconds `json:"nicErrorLeftSeconds"`
	NICErrorBackSeconds    []Seconds `json:"nicErrorBackSeconds"`
	NotReadyJoinSeconds    []Seconds `json:"notReadyJoinSeconds"`
	// UnservableHeld counts the routings found holding a Node that could not serve (its
	// Machine deleted, its NetworkInterface not Available, never Ready) past the bound.
	UnservableHeld int           `json:"unservableHeld"`
	Problems       []string      `json:"problems"`
	Timeline       []ChaosSample `json:"timeline"`
}

// Takeover is one disruption of the leader and how long the other replica took to lead.
type Takeover struct {
	// Kind is "kill" (SIGKILL) or "pause" (SIGSTOP until the other led, then SIGCONT).
	Kind      string  `json:"kind"`
	AtSeconds Seconds `json:"atSeconds"`
	// TakeoverSeconds runs from the disruption to the other replica acquiring the lease.
	TakeoverSeconds Seconds `json:"takeoverSeconds"`
	// WritesAfterTakeover are writes of a paused leader, to IronCore or to the cluster, after the
	// other took over.
	WritesAfterTakeover int `json:"writesAfterTakeover"`
	// RenewalsRefused are writes of the leader lease by a paused leader after the other took
	// over that the API server refused as conflicts: not counted as writes.
	RenewalsRefused int `json:"renewalsRefused,omitempty"`
	// CutAfterTakeover are requests of a paused leader after the other took over that the fence
	// cut off mid-request (sent on resuming from between its check and the send): the API
	// server did not receive them whole, so they are not counted as writes.
	CutAfterTakeover int `json:"cutAfterTakeover,omitempty"`
	// PausedAt is the write a paused leader was stopped in the middle of; empty if it made
	// none to be paused at.
	PausedAt string `json:"pausedAt,omitempty"`
}

// ChaosSample is the state of the run at one moment.
type ChaosSample struct {
	AtSeconds     Seconds `json:"atSeconds"`
	Services      int     `json:"services"`
	WithAddress   int     `json:"withAddress"`
	LoadBalancers int     `json:"loadBalancers"`
	Faults        bool    `json:"faults"`
}

// Name is the base name of the run's files.
func (r *ChaosResult) Name() string {
	return fmt.Sprintf("chaos-%s-n%d-s%d", r.Options.TargetMode(), r.Options.Nodes, r.Options.Services)
}

// TargetMode names how the run's Services are routed: "default" (the CCM writes every
// routing) or "selector" (--use-nic-selector=true).
func (o ChaosOptions) TargetMode() string {
	if o.Selecting {
		return "selector"
	}
	return "default"
}

// Write stores the result in dir as <name>.json, <name>.md and <name>.png.
func (r *ChaosResult) Write(dir string) ([]string, error) {
	return writeResult(dir, r.Name(), r, r.Markdown(), r.plot)
}

// Err is nil if the run broke no invariant.
func (r *ChaosResult) Err() error {
	if len(r.Problems) == 0 {
		return nil
	}
	return fmt.Errorf("%d problems, the first: %s", len(r.Problems), r.Problems[0])
}

// Markdown renders the result.
func (r *ChaosResult) Markdown() string {
	var b strings.Builder
	o := r.Options
	verdict := "passed: no invariant broken"
	if len(r.Problems) > 0 {
		verdict = fmt.Sprintf("FAILED: %d problems", len(r.Problems))
	}
	fmt.Fprintf(&b, "# Chaos, %s mode: %d Services churned over %d Nodes, %s\n\n", o.TargetMode(), r.ServicesCreated, o.Nodes, verdict)
	fmt.Fprintf(&b, "Run %s on %d CPUs (%s), %d GiB, kernel %s, %s; %.0fs in all. Seed %d, simulated IronCore latency %gs.\n\n",
		r.Date.Format("2006-01-02 15:04 UTC"), r.Machine.CPUs, r.Machine.CPUModel, r.Machine.MemoryGiB, r.Machine.Kernel, r.Machine.Go,
		float64(r.DurationSeconds), o.Seed, o.Latency.Seconds())
	fmt.Fprintf(&b, "Command: `ironcore-ccm-lab -nodes %d -services %d -waves %d -disruptions %d -fault-rate %g -seed %d -latency %s -target-modes %s chaos`\n\n",
		o.Nodes, o.Services, o.Waves, o.Disruptions, o.FaultRate, o.Seed, o.Latency, o.TargetMode())
	fmt.Fprintf(&b, "Two replicas, each run as `ironcore-cloud-controller-manager %s` (plus the stack's kubeconfigs and cloud-config), "+
		"each reaching IronCore through its own proxy, which logs its writes.\n\n", r.Command)
	fmt.Fprintf(&b, "In each of %d waves: %d new Services (one in five Internal, one in three of class ironcore.dev/load-balancer); every Service of the previous wave edited (ports; one in four "+
		"switched Public↔Internal, one in four Cluster↔Local, with endpoints on two Nodes; an annotation); the wave before that deleted; one Node leaves (its Machine deleted, its Ready condition Unknown) and one joins (every other Node gets its "+
		"pod CIDR from IronCore's IPAM through the CCM, the others register with theirs); the leader "+
		"killed right after an IronCore write or paused in the middle of a write to either API, %d times; one Node made unhealthy and healthy again (NotReady past the grace period, "+
		"or tainted for deletion by the cluster autoscaler, in turn), %s and one destination removed by hand "+
		"from a Local Service's routing; IronCore failing %g of requests (500s; 409s on writes, resets and 2 s delays "+
		"at half that; hangs at a fiftieth) and the target API a fifth of that; the simulated providers silent for 5 s. Then, with faults off: "+
		"one Machine deleted without draining while its Node is Ready (the Node then leaves), one NetworkInterface in Error and Available again, "+
		"one Node joining NotReady and Ready %s after it was initialized. After the last wave, the "+
		"run waits for the last waves' Services to be served right, checks every pod CIDR, deletes every Service, and waits for IronCore's "+
		"garbage collector.\n\n", o.Waves, o.Services/o.Waves, o.Disruptions, handEdit(o), o.FaultRate, notReadyHold)

	fmt.Fprintf(&b, "| What happened | count |\n|---|---:|\n")
	fmt.Fprintf(&b, "| Services created / edited / deleted | %d / %d / %d |\n", r.ServicesCreated, r.ServicesEdited, r.ServicesDeleted)
	fmt.Fprintf(&b, "| of the edits, type switches (Public↔Internal) / externalTrafficPolicy switches (Cluster↔Local) | %d / %d |\n", r.TypeSwitches, r.PolicySwitches)
	fmt.Fprintf(&b, "| Nodes joined / left | %d / %d |\n", r.NodesJoined, r.NodesLeft)
	fmt.Fprintf(&b, "| IronCore requests failed on purpose | %s |\n", kinds(r.FaultsInjected))
	fmt.Fprintf(&b, "| target API requests failed on purpose | %s |\n", kinds(r.TargetFaultsInjected))
	fmt.Fprintf(&b, "| Nodes made unhealthy and healthy again / target labels removed by hand / destinations removed by hand (Local / Cluster routings) | %d / %d / %d / %d |\n",
		r.HealthFlaps, len(r.LabelRepairSeconds), len(r.RoutingRepairSeconds), len(r.ClusterRoutingRepairSeconds))
	fmt.Fprintf(&b, "| Machines deleted with their Node Ready / NetworkInterfaces in Error / Nodes joined NotReady | %d / %d / %d |\n",
		len(r.MachineGoneLeftSeconds), len(r.NICErrorLeftSeconds), len(r.NotReadyJoinSeconds))
	fmt.Fprintf(&b, "| silent provider periods | %d |\n", r.SilentPeriods)
	fmt.Fprintf(&b, "| replicas that ended by themselves (restarted) | %d |\n\n", len(r.UnplannedExits))

	var kills, pauses []time.Duration
	writesAfter, midWrite, refused, cut := 0, 0, 0, 0
	for _, t := range r.Takeovers {
		d := time.Duration(float64(t.TakeoverSeconds) * float64(time.Second))
		if t.Kind == "pause" {
			pauses = append(pauses, d)
			if t.PausedAt != "" {
				midWrite++
			}
		} else {
			kills = append(kills, d)
		}
		writesAfter += t.WritesAfterTakeover
		refused += t.RenewalsRefused
		cut += t.CutAfterTakeover
	}
	fmt.Fprintf(&b, "| Leader takeovers (lease duration 4 s) | count | p50 | max |\n|---|---:|---:|---:|\n")
	for _, row := range []struct {
		name  string
		times []time.Duration
	}{{"leader killed (SIGKILL)", kills}, {"leader paused past its lease (SIGSTOP)", pauses}} {
		slices.Sort(row.times)
		t := newTimings(row.times)
		fmt.Fprintf(&b, "| %s | %d | %.2fs | %.2fs |\n", row.name, t.Count, t.P50, t.Max)
	}
	fmt.Fprintf(&b, "\n| Targets disturbed on purpose (must be followed or repaired within %s) | count | p50 | max |\n|---|---:|---:|---:|\n", targetBound)
	writeTimingRows(&b, []timingRow{
		{"Node unhealthy: until every routing that held it left it", r.FlapLeftSeconds},
		{"Node healthy again: until every such routing held it again", r.FlapBackSeconds},
		{"target label removed by hand: until the CCM put it back", r.LabelRepairSeconds},
		{"destination removed by hand from a Local Service's routing: until the CCM put it back", r.RoutingRepairSeconds},
		{"destination removed by hand from another Service's routing: until the CCM put it back", r.ClusterRoutingRepairSeconds},
	})
	fmt.Fprintf(&b, "\n| Nodes made unable to serve, faults off (%s) | count | p50 | max |\n|---|---:|---:|---:|\n", servingBoundOf(o))
	writeTimingRows(&b, []timingRow{
		{"Machine deleted, its Node still Ready: until no routing held it", r.MachineGoneLeftSeconds},
		{"NetworkInterface in Error: until no routing held it", r.NICErrorLeftSeconds},
		{"the same Available again: until every routing that held it did again", r.NICErrorBackSeconds},
		{"Node joined NotReady, then Ready: until every routing held it", r.NotReadyJoinSeconds},
	})
	fmt.Fprintf(&b, "\n| Invariant | measured |\n|---|---:|\n")
	fmt.Fprintf(&b, "| writes of any kind, to IronCore or to the cluster, by a paused leader after the other took over (paused mid-write: %d of %d; "+
		"lease renewals the API server refused as conflicts, not counted: %d; requests the fence cut off mid-request, which the API server did not receive whole, not counted: %d) | %d |\n",
		midWrite, len(pauses), refused, cut, writesAfter)
	fmt.Fprintf(&b, "| Nodes deleted whose Machine exists | %d |\n", r.WrongfulNodeDeletions)
	fmt.Fprintf(&b, "| Nodes of deleted Machines deleted (of %d) | %d |\n", r.NodesLeft, r.LeftNodesDeleted)
	fmt.Fprintf(&b, "| moments a Service had two IronCore LoadBalancers of one type | %d |\n", r.Duplicates)
	fmt.Fprintf(&b, "| moments a Service that had an address showed none (type switches included) | %d |\n", r.AddressesLost)
	fmt.Fprintf(&b, "| routing destinations of a Node still there dropped (of a Local Service: a Node of its endpoints) | %d |\n", len(r.TargetDrops))
	fmt.Fprintf(&b, "| Nodes unable to serve (Machine deleted, NetworkInterface not Available, never Ready) kept past the bound (%s; faults on: %s in all) | %d |\n",
		servingBoundOf(o), targetBound, r.UnservableHeld)
	fmt.Fprintf(&b, "| IronCore LoadBalancers, routings and LoadBalancer IP Prefixes left after every Service was deleted | %d |\n", r.Leftovers)
	fmt.Fprintf(&b, "| moments a pod CIDR was on two Nodes | %d |\n", r.SharedPodCIDRs)
	fmt.Fprintf(&b, "| pod CIDRs checked: each exactly once, on its Node's NetworkInterface (of Nodes, allocated by IronCore's IPAM) | %d (%d) |\n", r.PodCIDRsChecked, r.PodCIDRsAllocated)
	fmt.Fprintf(&b, "| from the end of the chaos until every Service was served right | %.1fs |\n\n", r.ConvergenceSeconds)
	if len(r.Problems) > 0 {
		fmt.Fprintf(&b, "Problems:\n\n")
		for _, p := range r.Problems[:min(len(r.Problems), 30)] {
			fmt.Fprintf(&b, "- %s\n", p)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "The plot (%s.png) shows the Services, those with an address and the IronCore LoadBalancers over the run; the grey line is up while faults were on, and the dots mark leader kills and pauses.\n", r.Name())
	return b.String()
}

// handEdit says what the run edits by hand besides a Local Service's routing: a target label
// in selector mode, where the CCM writes them, and another Service's routing in the default
// mode, where the CCM writes every routing.
func handEdit(o ChaosOptions) string {
	if o.Selecting {
		return "one target label removed by hand"
	}
	return "one destination removed by hand from the routing of a Service that is not Local"
}

// timingsOf summarizes durations in seconds.
func timingsOf(seconds []Seconds) Timings {
	durations := make([]time.Duration, 0, len(seconds))
	for _, s := range seconds {
		durations = append(durations, time.Duration(float64(s)*float64(time.Second)))
	}
	slices.Sort(durations)
	return newTimings(durations)
}

func kinds(counts map[string]int) string {
	if len(counts) == 0 {
		return "0"
	}
	total := 0
	var parts []string
	for _, kind := range slices.Sorted(maps.Keys(counts)) {
		total += counts[kind]
		parts = append(parts, fmt.Sprintf("%s %d", kind, counts[kind]))
	}
	return fmt.Sprintf("%d (%s)", total, strings.Join(parts, ", "))
}

// plot draws the timeline: Services, those with an address, LoadBalancers, and when faults
// were on, with the leader disruptions as marks.
func (r *ChaosResult) plot(path string) error {
	p := newPlot(fmt.Sprintf("chaos: %d Services over %d Nodes, two replicas", r.ServicesCreated, r.Options.Nodes), "seconds", "count")
	top := 1
	for _, s := range r.Timeline {
		top = max(top, s.Services, s.LoadBalancers)
	}
	var faults plotter.XYs
	for _, s := range r.Timeline {
		y := 0.0
		if s.Faults {
			y = float64(top)
		}
		faults = append(faults, plotter.XY{X: float64(s.AtSeconds), Y: y})
	}
	for _, series := range []struct {
		name  string
		value func(ChaosSample) float64
		color color.RGBA
	}{
		{"faults on", nil, color.RGBA{R: 200, G: 200, B: 200, A: 255}},
		{"Services", func(s ChaosSample) float64 { return float64(s.Services) }, color.RGBA{R: 31, G: 119, B: 180, A: 255}},
		{"with an address", func(s ChaosSample) float64 { return float64(s.WithAddress) }, color.RGBA{R: 44, G: 160, B: 44, A: 255}},
		{"IronCore LoadBalancers", func(s ChaosSample) float64 { return float64(s.LoadBalancers) }, color.RGBA{R: 214, G: 39, B: 40, A: 255}},
	} {
		points := faults
		if series.value != nil {
			points = make(plotter.XYs, 0, len(r.Timeline))
			for _, s := range r.Timeline {
				points = append(points, plotter.XY{X: float64(s.AtSeconds), Y: series.value(s)})
			}
		}
		if len(points) == 0 {
			continue
		}
		if err := addLine(p, series.name, points, series.color, vg.Points(1.5)); err != nil {
			return err
		}
	}
	var marks plotter.XYs
	for _, t := range r.Takeovers {
		marks = append(marks, plotter.XY{X: float64(t.AtSeconds), Y: 0})
	}
	if len(marks) > 0 {
		scatter, err := plotter.NewScatter(marks)
		if err != nil {
			return err
		}
		scatter.Color = color.RGBA{A: 255}
		p.Add(scatter)
		p.Legend.Add("leader killed or paused", scatter)
	}
	p.Legend.Top = true
	p.Legend.Left = true
	return p.Save(8*vg.Inch, 4*vg.Inch, path)
}

// servingBoundOf says how long a Node unable to serve may keep traffic, in the run's mode.
func servingBoundOf(o ChaosOptions) string {
	if o.Selecting {
		return fmt.Sprintf("the CCM: its target label off within %s, and no routing the CCM writes (a Local Service's) holding it for more than %s and %s per such routing; "+
			"IronCore's routings, which its LoadBalancer controller recomputes one at a time: within %s", o.unservableBound(), o.unservableBound(), routingWrite, targetBound)
	}
	return fmt.Sprintf("no routing may hold one for more than %s and %s per routing", o.unservableBound(), routingWrite)
}

// timingRow is a row of a Markdown table of timings: what was timed, and the times.
type timingRow struct {
	name    string
	seconds []Seconds
}

// writeTimingRows writes the rows of a table of count, p50 and max.
func writeTimingRows(b *strings.Builder, rows []timingRow) {
	for _, row := range rows {
		t := timingsOf(row.seconds)
		fmt.Fprintf(b, "| %s | %d | %.2fs | %.2fs |\n", row.name, t.Count, t.P50, t.Max)
	}
}
