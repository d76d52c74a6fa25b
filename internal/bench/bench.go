// Package bench measures how a CCM scales on the test stack: N Nodes (with pod CIDRs) and M
// Services of type LoadBalancer created in a burst, with the provider simulator answering after
// a set latency. It times Node initialization, load balancer readiness (against a floor: as
// many LoadBalancers created directly in IronCore, before the CCM starts), the load balancer
// routings reaching every Node, and route convergence; counts the CCM's IronCore API requests
// from outside the CCM (through the stack's proxy), during convergence and while idle; counts
// the Warning events about the burst's objects; and reads the CCM's peak memory and CPU time.
//
// The CCM under test is a command line with placeholders, so another build of this CCM, or any
// CCM that takes the same flags, can be measured with the same scenario.
package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/template"
	"time"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// DefaultCommand runs this repository's CCM with routes on. Placeholders: {{.Binary}} (this
// repository's CCM, built for the run), {{.TargetKubeconfig}}, {{.IronCoreKubeconfig}},
// {{.CloudConfig}}, {{.SecurePort}}, {{.ClusterCIDR}}.
const DefaultCommand = "{{.Binary}} --cloud-provider=ironcore --kubeconfig={{.TargetKubeconfig}} " +
	"--ironcore-kubeconfig={{.IronCoreKubeconfig}} --cloud-config={{.CloudConfig}} " +
	"--configure-cloud-routes=true --cluster-cidr={{.ClusterCIDR}} " +
	"--leader-elect=false --bind-address=127.0.0.1 --secure-port={{.SecurePort}} " +
	"--node-status-update-frequency={{.NodeSyncPeriod}} --v=1"

// Options describe one run.
type Options struct {
	// Nodes and Services are how many of each the burst creates.
	Nodes, Services int
	// Latency is how long the simulated IronCore providers take to report each change.
	Latency time.Duration
	// Idle is how long requests are counted after convergence; it should span a node sync.
	Idle time.Duration
	// NodeSyncPeriod is the CCM's --node-status-update-frequency in the default command.
	NodeSyncPeriod time.Duration
	// Command is the CCM command line, with placeholders (see DefaultCommand).
	Command string
	// Label names the CCM under test in the results.
	Label string
	// Prescheduled creates the Machines on the stack's MachinePools, so that provisioning many of them
	// does not wait for IronCore's scheduler.
	Prescheduled bool
	// Progress receives what the run is doing.
	Progress io.Writer
	// Alone has the run refuse to start beside a demo, lab or benchmark that still runs: its
	// timings would mean little.
	Alone bool
	// ClusterCIDR is the CCM's --cluster-cidr; empty means the burst's pod network.
	ClusterCIDR string
	// ProfileDir, if set, receives the CCM's CPU profiles while the burst converges and its
	// heap profile at convergence, taken from its secure port, and the run's diagnostics
	// (diagnostics.go).
	ProfileDir string
	// Outage, if set, makes IronCore unreachable for the CCM this long after the idle count;
	// then RecoveryServices new Services are timed to their address and first traffic.
	Outage time.Duration
	// Deadline is how long the burst may take to converge. A run past it records what was
	// done by then, and how much was not, instead of failing: a CCM that never finishes is
	// measured too. Zero means 30 minutes.
	Deadline time.Duration
	// Binary, if set, is the CCM binary {{.Binary}} stands for, instead of this checkout's.
	Binary string
	// Flags are the lab's own flags, recorded so that the result names how to reproduce it.
	Flags []string
	// Version is the version of the build that runs the benchmark.
	Version string
}

// RecoveryServices is how many Services are created when an outage ends.
const RecoveryServices = 10

// commandValues fill the placeholders of Options.Command.
type commandValues struct {
	Binary, TargetKubeconfig, IronCoreKubeconfig, CloudConfig, ClusterCIDR string
	SecurePort                                                             int
	NodeSyncPeriod                                                         time.Duration
}

// clusterCIDR is the benchmark cluster's pod network: Node i gets 10.(i/256).(i%256).0/24.
const clusterCIDR = "10.128.0.0/9"

func podCIDR(i int) string {
	return fmt.Sprintf("10.%d.%d.0/24", 128+i/256, i%256)
}

// Run runs the scenario once and returns its result.
func Run(ctx context.Context, opts Options) (*Result, error) {
	log := func(format string, args ...any) { fmt.Fprintf(opts.Progress, format+"\n", args...) }
	result := newResult(opts)
	stack, err := testenv.Start(ctx, testenv.Options{Progress: opts.Progress, SimulatorLatency: opts.Latency, Purpose: purpose(opts.Alone)})
	if err != nil {
		return nil, err
	}
	defer func() { _ = stack.Stop() }()
	result.StackStartup = newSeconds(stack.StartupDuration)

	log("creating %d Machines and waiting for IronCore to run them (not part of the CCM's time)...", opts.Nodes)
	provisioned := time.Now()
	if err := createMachines(ctx, stack, opts.Nodes, opts.Prescheduled); err != nil {
		return nil, err
	}
	result.MachineProvisioning = newSeconds(time.Since(provisioned))
	log("  %d Machines running with addresses after %s", opts.Nodes, time.Since(provisioned).Round(time.Second))

	log("floor: creating %d IronCore LoadBalancers directly and waiting for their addresses...", opts.Services)
	if result.Floor, err = measureFloor(ctx, stack, opts.Services, opts.Progress); err != nil {
		return nil, fmt.Errorf("measure the LoadBalancer floor: %w", err)
	}
	log("  floor: p50 %.3fs, max %.3fs; deleted again", result.Floor.P50, result.Floor.Max)
	log("floor under the burst: creating %d IronCore LoadBalancers directly while the %d NetworkInterfaces get their target labels and pod CIDRs...", opts.Services, opts.Nodes)
	if result.BurstFloor, err = measureBurstFloor(ctx, stack, opts.Services, opts.Progress); err != nil {
		return nil, fmt.Errorf("measure the LoadBalancer floor under the burst: %w", err)
	}
	log("  labels written in %.3fs; first traffic p50 %.3fs, max %.3fs; routing complete p50 %.3fs, max %.3fs; deleted, unlabelled and their pod CIDRs removed again",
		result.BurstFloor.LabelsWritten, result.BurstFloor.FirstTraffic.P50, result.BurstFloor.FirstTraffic.Max,
		result.BurstFloor.RoutingComplete.P50, result.BurstFloor.RoutingComplete.Max)

	ccm, port, err := startCCM(ctx, stack, opts)
	if err != nil {
		return nil, err
	}
	defer func() { _ = ccm.Stop() }()
	if err := waitForWatches(ctx, stack, ccm); err != nil {
		return nil, err
	}
	sampling, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	memory := sampleMemory(sampling, ccm.Pid())

	// The tracker's watches must end before the stack stops: an API server waits for open
	// watches on SIGTERM, which made every run 60 s longer.
	trackCtx, stopTracking := context.WithCancel(ctx)
	defer stopTracking()
	tracker, err := newTracker(trackCtx, stack, opts.Nodes, opts.Services)
	if err != nil {
		return nil, err
	}
	stack.IronCoreProxy.Reset()
	stack.TargetProxy.Reset()
	log("burst: creating %d Nodes and %d Services...", opts.Nodes, opts.Services)
	burst := time.Now()
	profiling, stopProfiling := context.WithCancel(ctx)
	defer stopProfiling()
	var prof *profiler
	var profiled <-chan error
	var diag *diagnostics
	if opts.ProfileDir != "" {
		if prof, err = newProfiler(ctx, port, opts.ProfileDir); err != nil {
			return nil, err
		}
		profiled = prof.cpuUntil(profiling)
		if diag, err = startDiagnostics(opts.ProfileDir, burst); err != nil {
			return nil, err
		}
	}
	if err := createBurst(ctx, stack, tracker, opts.Nodes, opts.Services); err != nil {
		return nil, err
	}
	deadline := opts.Deadline
	if deadline == 0 {
		deadline = 30 * time.Minute
	}
	done, err := tracker.waitAtMost(ctx, deadline, opts.Progress)
	if err != nil {
		return nil, fmt.Errorf("%w (CCM log: %s)", err, ccm.LogPath)
	}
	// Past the deadline, "converged" is the deadline: what was done by then is measured.
	converged := time.Now()
	if !done {
		log("not done after %s: %s; recording what was done (CCM log: %s)", deadline, tracker.progress(), ccm.LogPath)
		// Tracking stops here, so that the counts of what was not done and the timings agree.
		stopTracking()
	}
	if prof != nil {
		if err := diag.cpuUntilNow(); err != nil {
			return nil, err
		}
		stopProfiling()
		if err := errors.Join(<-profiled, prof.heap(ctx, "heap.pb.gz"), prof.metrics(ctx)); err != nil {
			return nil, err
		}
		log("CCM profiles in %s", opts.ProfileDir)
	}
	result.Convergence = newSeconds(converged.Sub(burst))
	result.Requests.Convergence = counts(stack.IronCoreProxy.Counts())
	writes := stack.IronCoreProxy.Writes()
	result.Requests.routingVolume(writes, opts.Nodes)
	result.Requests.Target = counts(stack.TargetProxy.Counts())
	result.Requests.statusWrites(stack.TargetProxy.Writes())
	if diag != nil {
		if err := diag.finish(ctx, stack, tracker, writes); err != nil {
			return nil, fmt.Errorf("write the diagnostics: %w", err)
		}
	}
	result.Requests.attribute(opts.Nodes, opts.Services)
	tracker.fill(result)
	if !done {
		result.Unfinished = tracker.unfinished()
	}
	result.AddressOverFloor = newRatio(result.LoadBalancerReadiness, result.Floor)
	result.FirstTrafficOverFloor = newRatio(result.FirstTraffic, result.BurstFloor.FirstTraffic)
	if done {
		log("converged %s after the burst began", converged.Sub(burst).Round(100*time.Millisecond))
	}
	if result.Warnings, err = countWarnings(ctx, stack, opts.Nodes, opts.Services); err != nil {
		return nil, err
	}

	if opts.Idle > 0 {
		log("counting the CCM's IronCore requests for %s of idleness...", opts.Idle)
		stack.IronCoreProxy.Reset()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(opts.Idle):
		}
		result.Requests.Idle = counts(stack.IronCoreProxy.Counts())
		result.Requests.IdleSeconds = opts.Idle.Seconds()
		writes = append(writes, stack.IronCoreProxy.Writes()...)
	}
	result.Requests.lastWrites(writes, converged)
	// Recovery waits for its Services with the burst's: after a burst that did not converge,
	// it would wait for what never came.
	if opts.Outage > 0 && done {
		if result.Recovery, err = measureRecovery(ctx, stack, tracker, opts.Outage, opts.Progress); err != nil {
			return nil, fmt.Errorf("%w (CCM log: %s)", err, ccm.LogPath)
		}
	}
	if result.CCM, err = processUsage(ccm.Pid()); err != nil {
		return nil, err
	}
	result.CCM.PeakAnonMiB, result.CCM.PeakFileMiB = memory.peaks()
	return result, nil
}

func startCCM(ctx context.Context, stack *testenv.Stack, opts Options) (*testenv.Process, int, error) {
	values := commandValues{
		TargetKubeconfig:   stack.CCMTargetKubeconfig,
		IronCoreKubeconfig: stack.CCMIronCoreKubeconfig,
		CloudConfig:        stack.CloudConfig,
		ClusterCIDR:        clusterCIDR,
		NodeSyncPeriod:     opts.NodeSyncPeriod,
	}
	if opts.ClusterCIDR != "" {
		values.ClusterCIDR = opts.ClusterCIDR
	}
	var err error
	if values.SecurePort, err = testenv.FreePort(); err != nil {
		return nil, 0, err
	}
	values.Binary = opts.Binary
	if values.Binary == "" && strings.Contains(opts.Command, "{{.Binary}}") {
		fmt.Fprintln(opts.Progress, "building the CCM binary...")
		if values.Binary, err = testenv.BuildCCM(ctx, stack.Dir, false); err != nil {
			return nil, 0, err
		}
	}
	tmpl, err := template.New("command").Option("missingkey=error").Parse(opts.Command)
	if err != nil {
		return nil, 0, fmt.Errorf("parse the CCM command: %w", err)
	}
	var command bytes.Buffer
	if err := tmpl.Execute(&command, values); err != nil {
		return nil, 0, fmt.Errorf("fill in the CCM command: %w", err)
	}
	if opts.ProfileDir != "" {
		command.WriteString(profileFlags)
	}
	fields := strings.Fields(command.String())
	if len(fields) == 0 {
		return nil, 0, fmt.Errorf("the CCM command is empty")
	}
	ccm, err := testenv.StartProcess(stack.Dir, "ccm", fields[0], fields[1:]...)
	if err != nil {
		return nil, 0, err
	}
	fmt.Fprintf(opts.Progress, "CCM running (pid %d), log: %s\n", ccm.Pid(), ccm.LogPath)
	return ccm, values.SecurePort, nil
}

// waitForWatches waits until the CCM watches the target cluster's Nodes and Services: its
// controllers have started, as they have long before a real cluster's Nodes come. A burst that
// began with the process measured its start-up too, and a start-up a second faster or slower
// changed how the burst met the controllers (one route pass over all Nodes, or two that raced
// the Node initializations), which moved Node initialization by more than any change measured.
func waitForWatches(ctx context.Context, stack *testenv.Stack, ccm *testenv.Process) error {
	watching := func() bool {
		seen := map[string]bool{}
		for _, count := range stack.TargetProxy.Counts() {
			if count.Verb == "watch" {
				seen[count.Resource] = true
			}
		}
		return seen["nodes"] && seen["services"]
	}
	return testenv.WaitFor(ctx, 2*time.Minute, "the CCM to watch Nodes and Services", func(context.Context) error {
		select {
		case <-ccm.Exited():
			return fmt.Errorf("the CCM exited (%w); log: %s", ccm.Err(), ccm.LogPath)
		default:
		}
		if !watching() {
			return errors.New("not yet")
		}
		return nil
	})
}

// purpose names the run to other runs when it wants the machine to itself.
func purpose(alone bool) string {
	if alone {
		return "benchmark"
	}
	return ""
}
