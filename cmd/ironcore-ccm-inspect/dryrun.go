package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spf13/pflag"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/dryrun"
)

// runDryRun reads the report a CCM running with --dry-run serves and prints it: 0 after
// printing it, 2 for wrong flags, 1 when it could not be read.
func runDryRun(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet(commandName+" dry-run", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	url := fs.String("url", "http://127.0.0.1:10290/dry-run", "The dry run's report: its --dry-run-address and the path /dry-run (reach a Pod's with kubectl port-forward).")
	output := fs.String("output", "text", "text (grouped by what matters before a switch) or json (the report as served).")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprintf(stdout, "Usage: %s dry-run [flags]\n\n"+
				"Shows what a CCM running with --dry-run would write to IronCore and to the cluster: deletions first,\n"+
				"then created LoadBalancers, Service addresses, routings (which Nodes in and out, and why), LoadBalancers,\n"+
				"NetworkInterfaces, Nodes, and the events it would record. It only reads. See docs/guides/preview-a-switch.md.\n\nFlags:\n%s",
				commandName, fs.FlagUsages())
			return 0
		}
		fail(stderr, fmt.Errorf("%w (see dry-run --help)", err))
		return 2
	}
	if fs.NArg() > 0 || (*output != "text" && *output != "json") {
		fail(stderr, fmt.Errorf("dry-run takes --url and --output=text|json only, got %q and --output=%q", fs.Args(), *output))
		return 2
	}
	report, err := readDryRun(ctx, *url)
	if err != nil {
		fail(stderr, err)
		return 1
	}
	if *output == "json" {
		encoder := json.NewEncoder(stdout)
		encoder.SetIndent("", "  ")
		err = encoder.Encode(report)
	} else {
		err = dryrun.Render(stdout, report)
	}
	if err != nil {
		fail(stderr, err)
		return 1
	}
	return 0
}

func readDryRun(ctx context.Context, url string) (dryrun.Report, error) {
	var report dryrun.Report
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return report, fmt.Errorf("--url: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return report, fmt.Errorf("read the dry run's report (is a CCM with --dry-run serving it there?): %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return report, fmt.Errorf("read the dry run's report from %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&report); err != nil {
		return report, fmt.Errorf("read the dry run's report from %s: %w", url, err)
	}
	return report, nil
}
