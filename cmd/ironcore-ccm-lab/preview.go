package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/dryrun"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// previewQuiet is how long a dry run's report must stay as it is before the demo prints it.
const previewQuiet = 5 * time.Second

// previewSwitch runs a second CCM with --dry-run and --use-nic-selector=true beside the one at
// work, and prints what switching it to selectors would write, which the dry run does not.
func previewSwitch(ctx context.Context, stack *testenv.Stack, binary string, args []string) error {
	fmt.Println("\nPreviewing a switch to --use-nic-selector=true: a second CCM with --dry-run runs beside this one, writes nothing, and reports what it would write...")
	port, err := testenv.FreePort()
	if err != nil {
		return err
	}
	address := "127.0.0.1:" + strconv.Itoa(port)
	args = append(args, "--use-nic-selector=true", "--dry-run", "--dry-run-address="+address)
	preview, _, err := stack.StartCCM(binary, "ironcore-ccm-preview", args...)
	if err != nil {
		return err
	}
	defer func() { _ = preview.Stop() }()
	url := "http://" + address + "/dry-run"
	var report dryrun.Report
	var last string
	quietSince := time.Now()
	err = testenv.WaitFor(ctx, convergeTimeout, "the dry run's report to settle", func(ctx context.Context) error {
		select {
		case <-preview.Exited():
			return fmt.Errorf("the dry run exited: %w (log: %s)", preview.Err(), preview.LogPath)
		default:
		}
		if report, err = readReport(ctx, url); err != nil {
			return err
		}
		var seen strings.Builder
		for _, write := range report.Writes {
			if write.Resource != "events" {
				fmt.Fprintf(&seen, "%s %s %s %v\n", write.Verb, write.Resource, write.Object(), write.Changes)
			}
		}
		if seen.String() != last || seen.Len() == 0 {
			last, quietSince = seen.String(), time.Now()
			return fmt.Errorf("%d writes so far", len(report.Writes))
		}
		if time.Since(quietSince) < previewQuiet {
			return fmt.Errorf("%d writes, unchanged for %s", len(report.Writes), time.Since(quietSince).Round(time.Second))
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := dryrun.RenderFirst(os.Stdout, report, 2); err != nil {
		return err
	}
	fmt.Printf("(the whole report: ironcore-ccm-inspect dry-run --url=%s while it runs; docs/guides/preview-a-switch.md)\n", url)
	return nil
}

func readReport(ctx context.Context, url string) (dryrun.Report, error) {
	var report dryrun.Report
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return report, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return report, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return report, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return report, json.NewDecoder(resp.Body).Decode(&report)
}
