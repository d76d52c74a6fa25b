package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/dryrun"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv/apiproxy"
)

// TestADryRunBesideTheReferenceReportsWhatTheTakeoverDoes starts a --dry-run CCM on what the
// reference CCM leaves, with one Node the reference still targets though it has not been Ready
// for an hour. The dry run sends no write to either API; its report names the unready Node,
// with its reason, in every routing's write, and stays as it is when every Service is synced
// again. Then the real takeover runs, and its writes are the report's, object by object.
func TestADryRunBesideTheReferenceReportsWhatTheTakeoverDoes(t *testing.T) {
	ref := layOutReferenceCluster(t, "preview", 4, 3)
	ctx := context.Background()
	unready := ref.names[0]
	if _, err := stack.SetNodeReadySince(ctx, unready, corev1.ConditionFalse, time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}

	// Leader election asked for, as the chart does: a dry run takes no lease all the same.
	preview := startObservedCCM(t, "ccm-preview", append(routeArgs(), "--dry-run", "--leader-elect=true")...)
	t.Cleanup(func() { preview.requireNoWrites(t) })
	report := preview.awaitReport(t, "every routing written without the unready Node", func(report dryrun.Report) error {
		for _, lb := range ref.lbs {
			if !slices.ContainsFunc(report.Writes, func(w dryrun.Write) bool {
				return w.Resource == "loadbalancerroutings.networking.ironcore.dev" && w.Name == lb.Name &&
					strings.Contains(w.Excluded[testenv.NetworkInterfaceName(unready)], "Ready condition has been False")
			}) {
				return fmt.Errorf("no write of routing %s leaving %s out for not being Ready", lb.Name, unready)
			}
		}
		return nil
	})
	// Every Service synced again changes nothing: the report is the steady difference.
	for _, service := range ref.services {
		setAnnotation(t, service, "preview.test/touched", "1")
	}
	again := preview.awaitReport(t, "every Service synced again", func(report dryrun.Report) error {
		for _, service := range ref.services {
			if !slices.ContainsFunc(report.Writes, func(w dryrun.Write) bool {
				return w.Resource == "events" && w.Name == "service/"+service.Name && strings.Contains(string(w.Change), `"EnsuredLoadBalancer"`) && w.Attempts >= 2
			}) {
				return fmt.Errorf("Service %s not synced again", service.Name)
			}
		}
		return nil
	})
	logReport(t, again)
	if before, after := changes(report), changes(again); !slices.Equal(before, after) {
		t.Errorf("the report changed when every Service was synced again:\nbefore %q\nafter  %q", before, after)
	}
	if err := preview.process.Stop(); err != nil {
		t.Fatal(err)
	}

	takeover := startObservedCCM(t, "ccm-takeover", routeArgs()...)
	testenv.Await(t, ctx, 3*waitTimeout, "the takeover to route every LoadBalancer without the unready Node", func(ctx context.Context) error {
		for _, lb := range ref.lbs {
			routing := &networkingv1alpha1.LoadBalancerRouting{}
			if err := stack.IronCore.Client.Get(ctx, client.ObjectKeyFromObject(lb), routing); err != nil {
				return err
			}
			if len(routing.Destinations) != len(ref.names)-1 {
				return fmt.Errorf("routing %s has %d destinations", lb.Name, len(routing.Destinations))
			}
		}
		return nil
	})
	waitForLoadBalancerSyncs(t, takeover.process, len(ref.services))
	if reported, made := objects(again), takeover.written(); !slices.Equal(reported, made) {
		t.Errorf("the dry run reported writes of\n%q\nthe takeover wrote\n%q", reported, made)
	}
}

// observedCCM is a CCM with proxies of its own to both APIs, whose write logs are its alone.
type observedCCM struct {
	process          *testenv.Process
	ironcore, target *apiproxy.Proxy
	dryRunURL        string
}

// startObservedCCM starts a CCM named name through proxies of its own, with the flags; with
// --dry-run, its report is served on a free port.
func startObservedCCM(t *testing.T, name string, args ...string) *observedCCM {
	t.Helper()
	ironcoreProxy, ironcoreKubeconfig, err := stack.StartIronCoreProxy(name)
	if err != nil {
		t.Fatal(err)
	}
	targetProxy, targetKubeconfig, err := stack.StartTargetProxy(name)
	if err != nil {
		t.Fatal(err)
	}
	ccm := &observedCCM{ironcore: ironcoreProxy, target: targetProxy}
	args = append(args, "--ironcore-kubeconfig="+ironcoreKubeconfig, "--kubeconfig="+targetKubeconfig,
		"--authentication-kubeconfig="+targetKubeconfig, "--authorization-kubeconfig="+targetKubeconfig)
	if slices.Contains(args, "--dry-run") {
		port, err := testenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		address := "127.0.0.1:" + strconv.Itoa(port)
		ccm.dryRunURL = "http://" + address + "/dry-run"
		args = append(args, "--dry-run-address="+address)
	}
	ccm.process = startCCMWithoutCrashCheck(t, name, args...)
	return ccm
}

// awaitReport reads the dry run's report until check accepts it.
func (c *observedCCM) awaitReport(t *testing.T, what string, check func(dryrun.Report) error) dryrun.Report {
	t.Helper()
	var report dryrun.Report
	t.Cleanup(func() {
		if t.Failed() {
			for _, line := range changes(report) {
				t.Logf("reported: %s", line)
			}
		}
	})
	testenv.Await(t, context.Background(), 2*waitTimeout, "the dry run's report: "+what, func(ctx context.Context) error {
		select {
		case <-c.process.Exited():
			return fmt.Errorf("the dry run exited: %w", c.process.Err())
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.dryRunURL, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: status %d", c.dryRunURL, resp.StatusCode)
		}
		report = dryrun.Report{}
		if err := json.NewDecoder(resp.Body).Decode(&report); err != nil {
			return err
		}
		return check(report)
	})
	return report
}

// requireNoWrites fails the test for every write the CCM sent to either API.
func (c *observedCCM) requireNoWrites(t *testing.T) {
	t.Helper()
	for api, proxy := range map[string]*apiproxy.Proxy{"IronCore": c.ironcore, "the cluster": c.target} {
		for _, write := range proxy.Writes() {
			t.Errorf("the dry run sent a write to %s: %s %s %s", api, write.Verb, write.Resource, write.Name)
		}
	}
}

// written names the objects the CCM wrote, as objects does; events are left out, their names
// are made up.
func (c *observedCCM) written() []string {
	var names []string
	for _, proxy := range []*apiproxy.Proxy{c.ironcore, c.target} {
		for _, write := range proxy.Writes() {
			if write.Resource != "events" {
				names = append(names, write.Verb+" "+write.Resource+" "+write.Name)
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// objects names the objects a report's writes change, as the proxies name them.
func objects(report dryrun.Report) []string {
	var names []string
	for _, w := range report.Writes {
		if w.Resource == "events" {
			continue
		}
		resource := w.Resource
		if w.Subresource != "" {
			resource += "/" + w.Subresource
		}
		names = append(names, w.Verb+" "+resource+" "+w.Name)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// changes lists a report's writes, each with its change, and without how often it was tried.
func changes(report dryrun.Report) []string {
	var lines []string
	for _, w := range report.Writes {
		lines = append(lines, fmt.Sprintf("%s %s %s %s %s: %s", w.Verb, w.Resource, w.Subresource, w.Object(), w.Reason, w.Change))
	}
	slices.Sort(lines)
	return lines
}

// TestADryRunInTheOtherModeReportsWhatTheSwitchDoes runs this CCM in the default mode on what
// the reference CCM leaves, then a --dry-run CCM with --use-nic-selector beside it: it sends
// no write, and its report, once the target labels it would write are in place and the
// selectors it would move have settled, holds the objects the real switch then writes.
func TestADryRunInTheOtherModeReportsWhatTheSwitchDoes(t *testing.T) {
	ref := layOutReferenceCluster(t, "othermode", 4, 3)
	current := startObservedCCM(t, "ccm-current", routeArgs()...)
	waitForSelectorMode(t, ref.lbs, ref.baseline, false)
	waitForLoadBalancerSyncs(t, current.process, len(ref.services))

	args := append(routeArgs(), "--use-nic-selector=true")
	preview := startObservedCCM(t, "ccm-preview-selector", append(args, "--dry-run")...)
	t.Cleanup(func() { preview.requireNoWrites(t) })
	report := preview.awaitReport(t, "every LoadBalancer selecting its targets by label", func(report dryrun.Report) error {
		for _, lb := range ref.lbs {
			if !slices.ContainsFunc(report.Writes, func(w dryrun.Write) bool {
				return w.Resource == "loadbalancers.networking.ironcore.dev" && w.Name == lb.Name &&
					slices.ContainsFunc(w.Changes, func(change string) bool {
						return strings.HasPrefix(change, "spec.networkInterfaceSelector") && strings.Contains(change, stack.ClusterName)
					})
			}) {
				return fmt.Errorf("no write of LoadBalancer %s selecting by the target label", lb.Name)
			}
		}
		return nil
	})
	logReport(t, report)
	if err := preview.process.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := current.process.Stop(); err != nil {
		t.Fatal(err)
	}

	switched := startObservedCCM(t, "ccm-switched", args...)
	waitForSelectorMode(t, ref.lbs, ref.baseline, true)
	waitForLoadBalancerSyncs(t, switched.process, len(ref.services))
	if reported, made := objects(report), switched.written(); !slices.Equal(reported, made) {
		t.Errorf("the dry run reported writes of\n%q\nthe switch wrote\n%q", reported, made)
	}
}

// logReport logs the report as ironcore-ccm-inspect dry-run prints it.
func logReport(t *testing.T, report dryrun.Report) {
	t.Helper()
	var rendered strings.Builder
	if err := dryrun.Render(&rendered, report); err != nil {
		t.Fatal(err)
	}
	t.Logf("the dry run's report:\n%s", rendered.String())
}
