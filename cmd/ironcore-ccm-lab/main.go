// Command ironcore-ccm-lab runs the IronCore CCM on a local Kubernetes and IronCore control
// plane: as a demo that shows what the CCM does and exits, or as a lab that keeps running for
// kubectl. It builds the servers it needs from Go modules on first use.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/bench"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/version"
)

const usage = `Usage: ironcore-ccm-lab [flags] [demo|lab|bench|churn|ipam|chaos|page|prepare]

  demo     start the local stack and the CCM, run a short scenario, print what the CCM did,
           and exit (the default)
  lab      like demo, then keep everything running for kubectl until Ctrl-C; with
           -fault-rate, the APIs fail a share of the CCM's requests meanwhile
  bench    measure the CCM: Nodes and Services created in a burst (see the bench flags)
  churn    measure Local Services whose endpoints move between Nodes: -nodes, -services,
           -rounds; how fast routings follow and how many IronCore writes each move costs
  ipam     measure pod CIDRs from IronCore's IPAM: -nodes dual-stack Nodes join at once; the
           time from each Node's creation to its pod CIDRs and its network, and the writes
  chaos    prove the CCM under churn and faults: two replicas with leader election; -services
           (default 1000) created, edited and deleted in -waves while Nodes (-nodes, default
           20) join and leave, the leader is killed or paused (-disruptions per wave), IronCore
           and the target API fail a share of requests (-fault-rate) and the simulated providers
           fall silent, then Machines are deleted, NetworkInterfaces fail and Nodes join
           NotReady; once per -target-modes (default, then selector); fails if an invariant
           broke (results in docs/reliability)
  page     regenerate the benchmark page (-out, default docs/benchmarks) from the runs in its
           results/: the table and one plot per size
  prepare  only build the servers the stack runs into bin/

Flags:
`

func main() {
	os.Exit(run())
}

func run() int {
	flags := flag.NewFlagSet("ironcore-ccm-lab", flag.ContinueOnError)
	latency := flags.Duration("latency", 200*time.Millisecond, "how long the simulated IronCore providers take to report each change (bench: 500ms if not set)")
	benchOptions := bench.Options{Command: bench.DefaultCommand, Progress: os.Stdout, Alone: true}
	flags.IntVar(&benchOptions.Nodes, "nodes", 100, "bench: Nodes (and Machines) to create")
	flags.IntVar(&benchOptions.Services, "services", 30, "bench: Services of type LoadBalancer to create")
	flags.DurationVar(&benchOptions.Idle, "idle", 70*time.Second, "bench: how long to count IronCore requests after convergence; should span --node-sync-period")
	flags.DurationVar(&benchOptions.NodeSyncPeriod, "node-sync-period", time.Minute, "bench: the CCM's --node-status-update-frequency in the default command")
	flags.StringVar(&benchOptions.Command, "command", bench.DefaultCommand, "bench: the CCM command line, with placeholders {{.Binary}} {{.TargetKubeconfig}} {{.IronCoreKubeconfig}} {{.CloudConfig}} {{.SecurePort}} {{.ClusterCIDR}} {{.NodeSyncPeriod}}")
	ccmArgs := flags.String("ccm-args", "", "bench, churn, ipam: flags appended to the CCM command line, e.g. --use-nic-selector=true")
	flags.StringVar(&benchOptions.ProfileDir, "profile", "", "bench: where to write the CCM's CPU profiles while the burst converges, a heap profile after each, and one at convergence; with them, the CCM's metrics at convergence, when each object was created and done, every write to both control planes, the events by reason, each process's CPU time over the burst and the stack's logs")
	flags.DurationVar(&benchOptions.Outage, "outage", 0, "bench: after the idle count, make IronCore unreachable for the CCM this long, then time "+
		strconv.Itoa(bench.RecoveryServices)+" new Services to their address and first traffic (0: no outage)")
	flags.StringVar(&benchOptions.Label, "label", "ironcore-ccm", "bench: the name of the CCM under test in the results")
	flags.BoolVar(&benchOptions.Prescheduled, "prescheduled", false, "bench: create the Machines on the stack's MachinePools, as if already scheduled, so that provisioning does not wait for IronCore's scheduler")
	flags.DurationVar(&benchOptions.Deadline, "deadline", 30*time.Minute, "bench: how long the burst may take to converge; past it the run records what was done and what was not")
	flags.StringVar(&benchOptions.Binary, "binary", "", "bench: the CCM binary {{.Binary}} stands for (default: this checkout's CCM, built for the run)")
	out := flags.String("out", "", "bench, churn, ipam, chaos, page: where to write the results (bench: docs/benchmarks/results; chaos: docs/reliability; churn, ipam, page: docs/benchmarks)")
	rounds := flags.Int("rounds", 5, "churn: rounds in which every Service's endpoint moves to another Node")
	quiet := flags.Duration("quiet", 5*time.Second, "churn: how long writes are counted after endpoint changes that move no Node")
	waves := flags.Int("waves", 5, "chaos: waves the Services are created, edited and deleted in")
	disruptions := flags.Int("disruptions", 2, "chaos: leader kills or pauses per wave")
	faultRate := flags.Float64("fault-rate", 0.05, "chaos: share of IronCore requests failed while faults are on; lab: if given, IronCore and the target API fail requests at this rate (the target API a fifth of it) while the lab runs")
	seed := flags.Uint64("seed", 1, "chaos: seed of the run's choices and fault draws")
	targetModes := flags.String("target-modes", "default,selector", "chaos: the target modes to run, one run each, in order: default (the CCM writes every routing) and selector (--use-nic-selector=true)")
	commandStarted := flags.Int64("started", 0, "demo: when the command that runs the demo started, in Unix seconds, so that the total time it prints counts downloads and builds")
	flags.Usage = func() {
		fmt.Fprint(flags.Output(), usage)
		flags.PrintDefaults()
	}
	if err := flags.Parse(os.Args[1:]); err != nil {
		return 2
	}
	mode := "demo"
	if flags.NArg() > 1 {
		flags.Usage()
		return 2
	}
	if flags.NArg() == 1 {
		mode = flags.Arg(0)
	}

	if *ccmArgs != "" {
		benchOptions.Command += " " + *ccmArgs
	}
	set := map[string]bool{}
	flags.Visit(func(f *flag.Flag) {
		set[f.Name] = true
		// Where the results and profiles go is not part of what was measured.
		if f.Name != "out" && f.Name != "profile" {
			benchOptions.Flags = append(benchOptions.Flags, bench.ShellFlag(f.Name, f.Value.String()))
		}
	})
	if mode == "bench" && !set["latency"] {
		// The bench's latency differs from the flag's default: recorded, a change of either
		// keeps the command true.
		benchOptions.Flags = append(benchOptions.Flags, bench.ShellFlag("latency", "500ms"))
	}
	benchOptions.Version = version.Get().Version
	if *out == "" {
		switch mode {
		case "chaos":
			*out = "docs/reliability"
		case "bench":
			*out = filepath.Join("docs/benchmarks", bench.ResultsDir)
		default:
			*out = "docs/benchmarks"
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch mode {
	case "prepare":
		err = prepare(ctx)
	case "demo", "lab":
		var since time.Time
		if *commandStarted > 0 {
			since = time.Unix(*commandStarted, 0)
		}
		rate := 0.0
		if mode == "lab" && set["fault-rate"] {
			rate = *faultRate
		}
		err = runScenario(ctx, *latency, mode == "lab", since, rate, *seed)
	case "bench":
		benchOptions.Latency = 500 * time.Millisecond
		if set["latency"] {
			benchOptions.Latency = *latency
		}
		err = runAndWrite(ctx, func(ctx context.Context) (*bench.Result, error) { return bench.Run(ctx, benchOptions) }, *out)
	case "churn":
		churn := bench.ChurnOptions{Nodes: benchOptions.Nodes, Services: benchOptions.Services, Rounds: *rounds, Latency: *latency,
			Command: benchOptions.Command, Label: benchOptions.Label, Quiet: *quiet, Progress: os.Stdout, Alone: true}
		err = runAndWrite(ctx, func(ctx context.Context) (*bench.ChurnResult, error) { return bench.RunChurn(ctx, churn) }, *out)
	case "ipam":
		ipam := bench.IPAMOptions{Nodes: benchOptions.Nodes, Latency: *latency, Command: benchOptions.Command, Label: benchOptions.Label,
			Progress: os.Stdout, Alone: true}
		err = runAndWrite(ctx, func(ctx context.Context) (*bench.IPAMResult, error) { return bench.RunIPAM(ctx, ipam) }, *out)
	case "page":
		err = writePage(*out)
	case "chaos":
		chaos := bench.ChaosOptions{Nodes: 20, Services: 1000, Waves: *waves, Disruptions: *disruptions, FaultRate: *faultRate,
			Seed: *seed, Latency: 100 * time.Millisecond, Progress: os.Stdout, Alone: true}
		if set["nodes"] {
			chaos.Nodes = benchOptions.Nodes
		}
		if set["services"] {
			chaos.Services = benchOptions.Services
		}
		if set["latency"] {
			chaos.Latency = *latency
		}
		err = runChaos(ctx, chaos, *targetModes, *out)
	default:
		flags.Usage()
		return 2
	}
	if errors.Is(err, context.Canceled) {
		fmt.Println("interrupted; everything stopped")
		return 130
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "\nironcore-ccm-lab %s failed: %v\n", mode, err)
		return 1
	}
	return 0
}

// runChaos runs the chaos scenario once per target mode, writing each run's results, and fails
// if any run broke an invariant.
func runChaos(ctx context.Context, chaos bench.ChaosOptions, modes, out string) error {
	var runs []bench.ChaosOptions
	for _, mode := range strings.Split(modes, ",") {
		switch strings.TrimSpace(mode) {
		case "default":
			chaos.Selecting = false
		case "selector":
			chaos.Selecting = true
		default:
			return fmt.Errorf("-target-modes: %q is neither default nor selector", mode)
		}
		runs = append(runs, chaos)
	}
	var failed []error
	for _, run := range runs {
		fmt.Printf("\nchaos in the %s target mode\n", run.TargetMode())
		var result *bench.ChaosResult
		err := runAndWrite(ctx, func(ctx context.Context) (*bench.ChaosResult, error) {
			var err error
			result, err = bench.RunChaos(ctx, run)
			return result, err
		}, out)
		if err != nil {
			return err
		}
		if err := result.Err(); err != nil {
			failed = append(failed, fmt.Errorf("%s mode: %w", run.TargetMode(), err))
		}
	}
	return errors.Join(failed...)
}

func prepare(ctx context.Context) error {
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	paths, err := testenv.EnsureBinaries(ctx, root, os.Stdout)
	if err != nil {
		return err
	}
	fmt.Printf("all %d servers are built in %s/bin\n", len(paths), root)
	return nil
}

// writePage regenerates the benchmark page in dir from the runs in its results: the table
// between its markers and one plot per size.
func writePage(dir string) error {
	results, err := bench.LoadResults(filepath.Join(dir, bench.ResultsDir))
	if err != nil {
		return err
	}
	if len(results) == 0 {
		return fmt.Errorf("no benchmark results in %s", filepath.Join(dir, bench.ResultsDir))
	}
	plots, err := bench.PlotSizes(results, filepath.Join(dir, bench.ResultsDir))
	if err != nil {
		return err
	}
	// Each run's files are a function of its result: rewritten, they show what this build shows.
	for _, r := range results {
		if _, err := r.Write(filepath.Join(dir, bench.ResultsDir)); err != nil {
			return err
		}
	}
	pagePath := filepath.Join(dir, "README.md")
	page, err := os.ReadFile(pagePath)
	if err != nil {
		return err
	}
	if page, err = bench.ReplaceTable(page, bench.Table(results)); err != nil {
		return fmt.Errorf("%s: %w", pagePath, err)
	}
	if err := os.WriteFile(pagePath, page, 0o644); err != nil {
		return err
	}
	fmt.Printf("wrote the table of %d runs into %s and %v\n", len(results), pagePath, plots)
	return nil
}

// benchResult is what the bench and churn runs produce.
type benchResult interface {
	Write(dir string) ([]string, error)
	Markdown() string
}

// runAndWrite runs a benchmark, writes its result into out and prints it.
func runAndWrite[R benchResult](ctx context.Context, run func(context.Context) (R, error), out string) error {
	started := time.Now()
	result, err := run(ctx)
	if err != nil {
		return err
	}
	files, err := result.Write(out)
	if err != nil {
		return err
	}
	fmt.Printf("\n%s\nwrote %v (the whole run took %s)\n", result.Markdown(), files, time.Since(started).Round(time.Second))
	return nil
}
