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
	"syscall"
	"time"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

const usage = `Usage: ironcore-ccm-lab [flags] [demo|lab|prepare]

  demo     start the local stack and the CCM, run a short scenario, print what the CCM did,
           and exit (the default)
  lab      like demo, then keep everything running for kubectl until Ctrl-C
  prepare  only build the servers the stack runs into bin/

Flags:
`

func main() {
	os.Exit(run())
}

func run() int {
	flags := flag.NewFlagSet("ironcore-ccm-lab", flag.ContinueOnError)
	latency := flags.Duration("latency", 200*time.Millisecond, "how long the simulated IronCore providers take to report each change")
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

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch mode {
	case "prepare":
		err = prepare(ctx)
	case "demo", "lab":
		err = runScenario(ctx, *latency, mode == "lab")
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
