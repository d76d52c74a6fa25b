// Package e2e runs the real CCM binary against the test stack, as a cluster would.
package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// stack and ccmBinary are shared by the package's tests.
var (
	stack     *testenv.Stack
	ccmBinary string
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	return testenv.Run(&stack, func() int {
		var err error
		ccmBinary, err = testenv.BuildCCM(context.Background(), stack.Dir, raceEnabled)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	})
}

// startCCM runs the CCM for the rest of the test, and checks when the test ends that it is
// still running: whatever the test did to it, it must not have crashed.
func startCCM(t *testing.T, name string, extraArgs ...string) *testenv.Process {
	t.Helper()
	ccm, _ := startCCMOnPort(t, name, extraArgs...)
	return ccm
}

// startCCMOnPort is startCCM that also returns the CCM's secure port.
func startCCMOnPort(t *testing.T, name string, extraArgs ...string) (*testenv.Process, int) {
	t.Helper()
	ccm, port, err := stack.StartCCM(ccmBinary, name, extraArgs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-ccm.Exited():
			t.Errorf("the CCM exited during the test (%v); its log:\n%s", ccm.Err(), readLog(ccm))
		default:
		}
		if err := ccm.Stop(); err != nil {
			t.Error(err)
		}
		checkRaces(t, name, readLog(ccm))
		checkPermissions(t, name, readLog(ccm))
		if t.Failed() {
			t.Logf("CCM log tail:\n%s", tail(readLog(ccm), 60))
		}
	})
	waitHealthy(t, port)
	return ccm, port
}

// checkPermissions fails the test for every request the CCM was forbidden to make: the CCM
// runs with exactly the roles rendered from the Helm chart, which must be enough.
func checkPermissions(t *testing.T, name, log string) {
	t.Helper()
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "forbidden") {
			t.Errorf("%s was refused a request; the rendered roles lack a permission:\n%s", name, line)
		}
	}
}

// goroutineCreation starts the part of a race report that says where the racing goroutines
// were created.
var goroutineCreation = regexp.MustCompile(`\n\s*Goroutine \d+ \(\w+\) created at:`)

// checkRaces fails the test for every data race the race detector reported in a CCM log whose
// racing accesses involve this module's code. A race entirely inside upstream code (k8s.io/cloud-provider's
// service controller writes its cached Service without its lock) is logged, not failed: it
// is not ours to fix here.
func checkRaces(t *testing.T, name, log string) {
	t.Helper()
	reports := strings.Split(log, "WARNING: DATA RACE")[1:]
	for _, report := range reports {
		report, _, _ = strings.Cut(report, "==================")
		// The accesses decide whose race it is, not where the goroutines were started: this
		// CCM starts the upstream service controller itself.
		accesses := report
		if at := goroutineCreation.FindStringIndex(report); at != nil {
			accesses = report[:at[0]]
		}
		if strings.Contains(accesses, "ironcore-cloud-controller-manager/") {
			t.Errorf("the race detector found a data race in %s:\n%s", name, report)
		} else {
			t.Logf("the race detector found a data race in upstream code in %s:\n%s", name, report)
		}
	}
}

// waitHealthy waits until the CCM serves /healthz on its secure port.
func waitHealthy(t *testing.T, port int) {
	t.Helper()
	httpClient := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed serving cert of a local test process
	url := "https://127.0.0.1:" + strconv.Itoa(port) + "/healthz"
	testenv.Await(t, context.Background(), time.Minute, "the CCM's /healthz", func(ctx context.Context) error {
		request, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := httpClient.Do(request)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
}

func readLog(p *testenv.Process) string {
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		return err.Error()
	}
	return string(data)
}

func tail(text string, lines int) string {
	all := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
