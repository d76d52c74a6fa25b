package bench

import (
	"encoding/json"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Name is the base name of the run's files: label, Nodes and Services.
func (r *Result) Name() string {
	return fmt.Sprintf("%s-n%d-s%d", r.Label, r.Nodes, r.Services)
}

// Write stores the result in dir as <name>.json, <name>.md and <name>.png.
func (r *Result) Write(dir string) ([]string, error) {
	return writeResult(dir, r.Name(), r, r.Markdown(), r.plot)
}

// writeResult stores a result in dir as <name>.json and <name>.md, and as <name>.png drawn by
// plot unless it is nil, and returns the files written.
func writeResult(dir, name string, result any, markdown string, plot func(path string) error) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	base := filepath.Join(dir, name)
	data, err := json.MarshalIndent(result, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(base+".json", append(data, '\n'), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(base+".md", []byte(markdown), 0o644); err != nil {
		return nil, err
	}
	if plot == nil {
		return []string{base + ".json", base + ".md"}, nil
	}
	if err := plot(base + ".png"); err != nil {
		return nil, err
	}
	return []string{base + ".json", base + ".md", base + ".png"}, nil
}

// Markdown renders the result as tables.
func (r *Result) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s: %d Nodes, %d Services\n\n", r.Label, r.Nodes, r.Services)
	placement := "placed by IronCore's scheduler"
	if r.Prescheduled {
		placement = "pre-scheduled: created on their MachinePools"
	}
	fmt.Fprintf(&b, "Run %s on %d CPUs (%s), %d GiB, kernel %s, %s. Simulated IronCore latency %gs per change; "+
		"--node-status-update-frequency %gs. IronCore ran the %d Machines (%s) in %gs before the burst (not the CCM's time).\n\n",
		r.Date.Format("2006-01-02 15:04 UTC"), r.Machine.CPUs, r.Machine.CPUModel, r.Machine.MemoryGiB, r.Machine.Kernel, r.Machine.Go,
		r.Latency, r.NodeSyncPeriod, r.Nodes, placement, r.MachineProvisioning)
	fmt.Fprintf(&b, "CCM command: `%s`\n\n", r.Command)
	if len(r.Flags) > 0 {
		fmt.Fprintf(&b, "Reproduce with `%s` (this run: %s).\n\n", reproduceCommand(r.Flags), r.Version)
	}
	fmt.Fprintf(&b, "![The share of Nodes, Services, routings and routes done by each second](%s.png)\n\n", r.Name())
	if r.Unfinished != nil {
		fmt.Fprintf(&b, "**Not converged**: the run stopped waiting at its deadline, %gs after the burst began: %s. "+
			"The times below are of the objects that were done; \"convergence\" below means the deadline.\n\n", r.Convergence, r.Unfinished)
	}
	fmt.Fprintf(&b, "| From creation to | count | p50 | p95 | max |\n|---|---:|---:|---:|---:|\n")
	for _, row := range []struct {
		name string
		t    Timings
	}{
		{"Node initialized", r.NodeInitialization},
		{"Service taken by the service controller (its finalizer)", r.LoadBalancerTaken},
		{"Service's IronCore LoadBalancer created", r.LoadBalancerCreated},
		{"Service's IronCore LoadBalancer has an address", r.LoadBalancerAddress},
		{"Service has an address", r.LoadBalancerReadiness},
		{"Service's routing reaches a Node", r.FirstDestination},
		{"Service has traffic: an address and a Node", r.FirstTraffic},
		{"Service's routing reaches every Node", r.RoutingComplete},
		{"pod CIDR on the NIC", r.RouteConvergence},
	} {
		fmt.Fprintf(&b, "| %s | %d | %.3fs | %.3fs | %.3fs |\n", row.name, row.t.Count, row.t.P50, row.t.P95, row.t.Max)
	}
	if r.Unfinished == nil {
		fmt.Fprintf(&b, "\nEverything converged %.3fs after the burst began.\n\n", r.Convergence)
	} else {
		fmt.Fprintf(&b, "\nNot everything converged; the run stopped waiting %.3fs after the burst began.\n\n", r.Convergence)
	}
	fmt.Fprintf(&b, "A Node eligible (initialized and Ready), or the Service created if later, until the Service's routing held it, "+
		"the longest of its Nodes per Service: p50 %.3fs, p95 %.3fs, max %.3fs; destinations held before their Node was eligible: %d.\n\n",
		r.EligibleToRouted.P50, r.EligibleToRouted.P95, r.EligibleToRouted.Max, r.RoutedBeforeEligible)
	if r.ReadyBeforeRouted.Services == 0 {
		fmt.Fprintf(&b, "No Service had an address before its IronCore LoadBalancerRouting reached every Node.\n\n")
	} else {
		fmt.Fprintf(&b, "%d of %d Services had an address before their IronCore LoadBalancerRouting reached every Node; "+
			"the longest such wait for traffic to reach every Node was %.3fs.\n\n", r.ReadyBeforeRouted.Services, r.Services, r.ReadyBeforeRouted.Max)
	}
	if r.AddressWithoutDestination.Services == 0 {
		fmt.Fprintf(&b, "No Service showed an address while its routing reached no Node.\n\n")
	} else {
		fmt.Fprintf(&b, "%d of %d Services showed an address while their routing reached no Node, %d of them for longer than %s; "+
			"the longest such stretch was %.3fs.\n\n", r.AddressWithoutDestination.Services, r.Services,
			r.AddressWithoutDestination.Longer, nowhereTolerance, r.AddressWithoutDestination.Max)
	}
	written := "the cluster and target labels they select"
	if r.BurstFloor.Routes {
		written += " and a pod CIDR prefix, as the CCM's routes give them"
	}
	fmt.Fprintf(&b, "IronCore's own pace under the burst (the burst floor): as many IronCore LoadBalancers as Services, "+
		"created directly and at once while the %d NetworkInterfaces got %s "+
		"(one patch each, all written %.3fs after the start), before the CCM started, and deleted again:\n\n", r.Nodes, written, r.BurstFloor.LabelsWritten)
	fmt.Fprintf(&b, "| From creation to | floor p50 | floor max | Service p50 | Service max | Service / floor p50 | max |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, row := range []struct {
		name            string
		floor, services Timings
	}{
		{"an address", r.BurstFloor.Address, r.LoadBalancerReadiness},
		{"routing reaches a Node", r.BurstFloor.FirstDestination, r.FirstDestination},
		{"traffic: an address and a Node", r.BurstFloor.FirstTraffic, r.FirstTraffic},
		{"routing reaches every Node", r.BurstFloor.RoutingComplete, r.RoutingComplete},
	} {
		fmt.Fprintf(&b, "| %s | %.3fs | %.3fs | %.3fs | %.3fs | %.2f× | %.2f× |\n", row.name, row.floor.P50, row.floor.Max,
			row.services.P50, row.services.Max, ratio(row.services.P50, row.floor.P50), ratio(row.services.Max, row.floor.Max))
	}
	fmt.Fprintf(&b, "\n")
	fmt.Fprintf(&b, "Addresses against the floor: as many IronCore LoadBalancers as Services (one TCP port, every fifth Internal, as the Services), "+
		"created directly and at once before the CCM started, and deleted again:\n\n")
	fmt.Fprintf(&b, "| From creation to an address | count | p50 | p95 | max |\n|---|---:|---:|---:|---:|\n")
	fmt.Fprintf(&b, "| IronCore LoadBalancer alone (floor) | %d | %.3fs | %.3fs | %.3fs |\n", r.Floor.Count, r.Floor.P50, r.Floor.P95, r.Floor.Max)
	fmt.Fprintf(&b, "| Service, through the CCM | %d | %.3fs | %.3fs | %.3fs |\n",
		r.LoadBalancerReadiness.Count, r.LoadBalancerReadiness.P50, r.LoadBalancerReadiness.P95, r.LoadBalancerReadiness.Max)
	fmt.Fprintf(&b, "| Service / floor | | %.2f× | | %.2f× |\n\n", r.AddressOverFloor.P50, r.AddressOverFloor.Max)
	fmt.Fprintf(&b, "CCM: peak resident memory %.1f MiB (anonymous %.1f MiB, file-backed %.1f MiB, each at its own peak), %.1f CPU seconds over the run.\n\n",
		r.CCM.PeakRSSMiB, r.CCM.PeakAnonMiB, r.CCM.PeakFileMiB, r.CCM.CPUSeconds)
	fmt.Fprintf(&b, "IronCore API requests by the CCM, counted by a proxy in front of IronCore:\n\n")
	fmt.Fprintf(&b, "| verb | resource | during convergence | idle, %gs |\n|---|---|---:|---:|\n", r.Requests.IdleSeconds)
	idle := map[string]RequestCount{}
	for _, c := range r.Requests.Idle {
		idle[c.Verb+" "+c.Resource] = c
	}
	seen := map[string]bool{}
	for _, c := range r.Requests.Convergence {
		key := c.Verb + " " + c.Resource
		seen[key] = true
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", c.Verb, c.Resource, c.cell(), idle[key].cell())
	}
	for _, c := range r.Requests.Idle {
		if !seen[c.Verb+" "+c.Resource] {
			fmt.Fprintf(&b, "| %s | %s | 0 | %s |\n", c.Verb, c.Resource, c.cell())
		}
	}
	fmt.Fprintf(&b, "| **all** | | **%d** (writes %d) | **%d** (writes %d) |\n\n",
		total(r.Requests.Convergence, false), total(r.Requests.Convergence, true), total(r.Requests.Idle, false), total(r.Requests.Idle, true))
	fmt.Fprintf(&b, "Target cluster API requests by the CCM during convergence, counted by a proxy in front of it: %d (writes %d)",
		total(r.Requests.Target, false), total(r.Requests.Target, true))
	if len(r.Requests.Target) > 0 {
		fmt.Fprintf(&b, ":\n\n| verb | resource | count |\n|---|---|---:|\n")
		for _, c := range r.Requests.Target {
			fmt.Fprintf(&b, "| %s | %s | %s |\n", c.Verb, c.Resource, c.cell())
		}
	}
	fmt.Fprintf(&b, "\n\n")
	fmt.Fprintf(&b, "During convergence: %.2f writes per Node (on Machines and NetworkInterfaces), "+
		"%.2f requests per Service (on LoadBalancers and LoadBalancerRoutings). %d IronCore writes came after convergence; "+
		"the last one %.3fs after it.\n\n", r.Requests.WritesPerNode, r.Requests.RequestsPerService, r.Requests.WritesAfterConvergence, r.Requests.LastWrite)
	// Runs recorded before the bytes were counted have none: nothing is said rather than zero.
	if r.Requests.RoutingBytes > 0 {
		fmt.Fprintf(&b, "LoadBalancerRouting writes during convergence: %d, %.2f per routing, %.1f MiB in all, %.1f KiB per Node",
			r.Requests.RoutingWrites, r.perRouting(), float64(r.Requests.RoutingBytes)/(1<<20), r.Requests.RoutingBytesPerNode/1024)
		if r.Requests.FullRoutingWrites > 0 {
			fmt.Fprintf(&b, "; of them %d of more than %d KiB, %.2f per routing (the others are first routings of a few Nodes)",
				r.Requests.FullRoutingWrites, smallRouting>>10, perObject(r.Requests.FullRoutingWrites, r.Services))
		}
		b.WriteString(".\n\n")
	}
	if perService, estimated := r.perService(); !estimated {
		fmt.Fprintf(&b, "Service status writes during convergence: %d, %.2f per Service; besides them, %d patches of the status subresource that only add the service controller's finalizer.\n\n",
			r.Requests.StatusWrites, perService, r.Requests.FinalizerPatches)
	}
	if rec := r.Recovery; rec != nil {
		fmt.Fprintf(&b, "After an IronCore outage of %.0fs (unreachable for the CCM), %d Services created when it ended: "+
			"address p50 %.3fs / max %.3fs, first traffic p50 %.3fs / max %.3fs.\n\n",
			rec.OutageSeconds, rec.Address.Count, rec.Address.P50, rec.Address.Max, rec.FirstTraffic.P50, rec.FirstTraffic.Max)
	}
	fmt.Fprintf(&b, "Warning events about the burst's Nodes and Services after convergence: %d events, %d occurrences",
		r.Warnings.Events, r.Warnings.Occurrences)
	if len(r.Warnings.ByReason) == 0 {
		fmt.Fprintf(&b, ".\n")
		return b.String()
	}
	fmt.Fprintf(&b, ":\n\n| kind | reason | objects | events | occurrences |\n|---|---|---:|---:|---:|\n")
	for _, c := range r.Warnings.ByReason {
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d |\n", c.Kind, c.Reason, c.Objects, c.Events, c.Occurrences)
	}
	return b.String()
}

// cell shows a count in the requests table, with the refused ones if any.
func (c RequestCount) cell() string {
	if c.Refused == 0 {
		return strconv.Itoa(c.Count)
	}
	return fmt.Sprintf("%d (%d refused)", c.Count, c.Refused)
}

// newPlot is a plot with the title, axis labels and a grid.
func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Add(plotter.NewGrid())
	return p
}

// addLine draws the points on p as a line of the color and width, named in the legend.
func addLine(p *plot.Plot, name string, points plotter.XYs, c color.Color, width vg.Length) error {
	line, err := plotter.NewLine(points)
	if err != nil {
		return err
	}
	line.Color = c
	line.Width = width
	p.Add(line)
	p.Legend.Add(name, line)
	return nil
}

// plot draws the distribution of times to done: the share of objects done by each time.
func (r *Result) plot(path string) error {
	p := newPlot(fmt.Sprintf("%s: %d Nodes, %d Services (simulated IronCore latency %gs)", r.Label, r.Nodes, r.Services, r.Latency),
		"seconds from creation", "share done")
	p.Y.Min, p.Y.Max = 0, 1
	for _, series := range []struct {
		name  string
		t     Timings
		color color.RGBA
	}{
		{"Node initialized", r.NodeInitialization, color.RGBA{R: 31, G: 119, B: 180, A: 255}},
		{"Service has an address", r.LoadBalancerReadiness, color.RGBA{R: 214, G: 39, B: 40, A: 255}},
		{"Service has traffic", r.FirstTraffic, color.RGBA{R: 255, G: 127, B: 14, A: 255}},
		{"Service's routing reaches every Node", r.RoutingComplete, color.RGBA{R: 148, G: 103, B: 189, A: 255}},
		{"pod CIDR on the NIC", r.RouteConvergence, color.RGBA{R: 44, G: 160, B: 44, A: 255}},
		{"LoadBalancer alone (floor)", r.Floor, color.RGBA{R: 127, G: 127, B: 127, A: 255}},
		{"LoadBalancer alone under the burst: traffic", r.BurstFloor.FirstTraffic, color.RGBA{R: 90, G: 90, B: 90, A: 255}},
		{"LoadBalancer alone under the burst: every Node", r.BurstFloor.RoutingComplete, color.RGBA{R: 188, G: 189, B: 34, A: 255}},
	} {
		if len(series.t.All) == 0 {
			continue
		}
		points := make(plotter.XYs, 0, len(series.t.All)+1)
		points = append(points, plotter.XY{X: 0, Y: 0})
		for j, s := range series.t.All {
			points = append(points, plotter.XY{X: float64(s), Y: float64(j+1) / float64(len(series.t.All))})
		}
		if err := addLine(p, series.name, points, series.color, vg.Points(2)); err != nil {
			return err
		}
	}
	p.Legend.Top = false
	p.Legend.Left = false
	return p.Save(7*vg.Inch, 4*vg.Inch, path)
}
