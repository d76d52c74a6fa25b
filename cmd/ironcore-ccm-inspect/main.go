// Command ironcore-ccm-inspect shows, read-only, how a cluster's Nodes, Services of type
// LoadBalancer and pod routes map to IronCore as the IronCore CCM sees them, and what differs.
// See docs/inspect.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/inspect"
)

const commandName = "ironcore-ccm-inspect"

func main() {
	// The IronCore cache logs through controller-runtime; send that to klog (stderr).
	ctrllog.SetLogger(klog.Background())
	os.Exit(runWithSignals(os.Args[1:]))
}

// runWithSignals runs the command until it ends or is interrupted.
func runWithSignals(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx, args, os.Stdout, os.Stderr)
}

// run is the whole command; it returns the exit status: 0 after printing the report, 2 for
// wrong flags, 1 when the inspection failed. Every failure is one line on stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "dry-run" {
		return runDryRun(ctx, args[1:], stdout, stderr)
	}
	options := inspect.NewOptions()
	fs := pflag.NewFlagSet(commandName, pflag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are printed below, on one line
	options.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprintf(stdout, "Usage: %s --ironcore-kubeconfig=FILE --cloud-config=FILE [flags]\n"+
				"       %s dry-run [--url=URL] [--output=text|json]\n\n"+
				"Shows how the cluster's Nodes, Services of type LoadBalancer and routes map to IronCore, as the\n"+
				"IronCore cloud-controller-manager sees them, and what differs. It only reads.\n"+
				"dry-run shows what a CCM running with --dry-run would write (see its --help).\n\nFlags:\n%s", commandName, commandName, fs.FlagUsages())
			return 0
		}
		fail(stderr, fmt.Errorf("%w (see --help)", err))
		return 2
	}
	if fs.NArg() > 0 {
		fail(stderr, fmt.Errorf("unexpected arguments %q (see --help)", fs.Args()))
		return 2
	}
	options.SetChanged(fs)
	if err := options.Validate(); err != nil {
		fail(stderr, err)
		return 2
	}
	report, err := inspect.Run(ctx, options)
	if err != nil {
		fail(stderr, err)
		return 1
	}
	if err := report.Write(stdout, options.Output); err != nil {
		fail(stderr, err)
		return 1
	}
	return 0
}

// fail prints err as one line: joined errors become "; "-separated.
func fail(stderr io.Writer, err error) {
	fmt.Fprintf(stderr, "%s: %s\n", commandName, strings.ReplaceAll(err.Error(), "\n", "; "))
}
