package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv/apiproxy"
)

// TestStartupProblemsEndWithOneClearMessage runs the binary with broken configurations: each
// must exit with status 1 and a message naming the problem, without a stack trace, and write
// nothing, to IronCore or to the cluster. Each reaches both through proxies of its own, whose
// logs show every write; leader election is on, so a start that went on past the problem
// would write its lease at once.
func TestStartupProblemsEndWithOneClearMessage(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	ironcoreProxy, ironcoreKubeconfig, err := stack.StartIronCoreProxy("bad-start")
	if err != nil {
		t.Fatal(err)
	}
	targetProxy, targetKubeconfig, err := stack.StartTargetProxy("bad-start")
	if err != nil {
		t.Fatal(err)
	}
	noNamespace, err := os.ReadFile(ironcoreKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	noNamespaceKubeconfig := write("no-namespace.kubeconfig", strings.Replace(string(noNamespace), "namespace: "+stack.Namespace, "", 1))

	for _, tc := range []struct {
		name  string
		args  []string
		setup func(t *testing.T)
		want  []string
	}{{
		name: "misspelt cloud-config key",
		args: []string{"--cloud-config=" + write("misspelt.yaml", "netwrokName: cluster-network\nclusterName: lab\n")},
		want: []string{`unknown key "netwrokName" (did you mean "networkName"?)`},
	}, {
		name: "several invalid values",
		args: []string{"--cloud-config=" + write("invalid.yaml", "prefixName: Bad_Name\n"), "--ironcore-api-qps=0"},
		want: []string{"networkName is required", `prefixName "Bad_Name"`, "clusterName is required", "--ironcore-api-qps must be positive"},
	}, {
		name: "cluster names differ",
		args: []string{"--cluster-name=other"},
		want: []string{`cloud-config clusterName "lab" and --cluster-name "other" differ`},
	}, {
		name: "missing Network",
		args: []string{"--cloud-config=" + write("missing-network.yaml", "networkName: no-such-network\nclusterName: lab\n")},
		want: []string{"IronCore Network " + stack.Namespace + "/no-such-network", "not found"},
	}, {
		name: "missing pod CIDR parent",
		args: []string{"--cloud-config=" + write("missing-pod-parent.yaml", "networkName: cluster-network\nclusterName: lab\npodCIDRParentPrefix: no-such-prefix\n")},
		want: []string{"podCIDRParentPrefix: IronCore Prefix " + stack.Namespace + "/no-such-prefix", "not found"},
	}, {
		name: "pod CIDRs that do not fit their parent",
		args: []string{"--cloud-config=" + write("pod-cidrs-too-large.yaml", "networkName: cluster-network\nclusterName: lab\npodCIDRParentPrefix: "+
			testenv.NodePrefixV4+"\npodCIDRMaskSize: 16\nipv6PodCIDRParentPrefix: "+testenv.NodePrefixV4+"\n")},
		want: []string{"podCIDRParentPrefix: IronCore Prefix " + testenv.NodePrefixV4 + " (10.0.0.0/16) is not larger than the pod CIDRs (/16, podCIDRMaskSize)",
			"ipv6PodCIDRParentPrefix: IronCore Prefix " + testenv.NodePrefixV4 + " is IPv4, not IPv6"},
	}, {
		name: "no pod CIDR parent with the labels",
		args: []string{"--cloud-config=" + write("no-labelled-parent.yaml", "networkName: cluster-network\nclusterName: lab\nipv6PodCIDRParentPrefixLabels: {no-such: label}\n")},
		want: []string{"ipv6PodCIDRParentPrefixLabels: no IPv6 Prefix labelled map[no-such:label] larger than /64 exists"},
	}, {
		name: "leader election timings that leave no time to write",
		args: []string{"--leader-elect-lease-duration=1500ms", "--leader-elect-renew-deadline=1s", "--leader-elect-retry-period=500ms"},
		want: []string{"leave 500ms to write after each renewal", "lengthen the lease duration"},
	}, {
		name: "IronCore kubeconfig without a namespace",
		args: []string{"--ironcore-kubeconfig=" + noNamespaceKubeconfig},
		want: []string{"sets no namespace"},
	}, {
		name: "IronCore unreachable",
		setup: func(t *testing.T) {
			if err := ironcoreProxy.SetMode(apiproxy.Down); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = ironcoreProxy.SetMode(apiproxy.Forward) })
		},
		want: []string{"cannot reach the IronCore API"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setup != nil {
				tc.setup(t)
			}
			ironcoreProxy.Reset()
			targetProxy.Reset()
			args, _, err := stack.CCMArgs(append([]string{"--ironcore-kubeconfig=" + ironcoreKubeconfig, "--kubeconfig=" + targetKubeconfig,
				"--leader-elect=true"}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			output, err := exec.CommandContext(ctx, ccmBinary, args...).CombinedOutput()
			for _, write := range append(ironcoreProxy.Writes(), targetProxy.Writes()...) {
				t.Errorf("the failed start wrote: %s %s %s", write.Verb, write.Resource, write.Name)
			}
			var exitErr *exec.ExitError
			if !errors.As(err, &exitErr) || exitErr.ExitCode() != 1 {
				t.Fatalf("exit: %v, want status 1; output:\n%s", err, tail(string(output), 20))
			}
			text := string(output)
			for _, want := range tc.want {
				if !strings.Contains(text, want) {
					t.Errorf("output does not contain %q:\n%s", want, tail(text, 5))
				}
			}
			if strings.Contains(text, "goroutine ") || strings.Contains(text, "panic") {
				t.Errorf("output has a stack trace:\n%s", text)
			}
		})
	}
}

// TestHelpListsTheIronCoreFlags keeps --help true to the configuration guide.
func TestHelpListsTheIronCoreFlags(t *testing.T) {
	output, err := exec.Command(ccmBinary, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("--help: %v\n%s", err, output)
	}
	for _, flag := range []string{"--ironcore-kubeconfig", "--use-nic-selector", "--ironcore-api-qps", "--ironcore-api-burst", "--orphan-load-balancer-cleanup", "--orphan-load-balancer-grace-period", "--cloud-config", "--cluster-name", "--controllers", "--concurrent-service-syncs"} {
		if !strings.Contains(string(output), flag) {
			t.Errorf("--help does not list %s", flag)
		}
	}
}

// TestStartupRidesOutAnIronCoreHiccup starts the CCM while IronCore answers every request
// with 503, and lets IronCore answer again once the CCM has said it is trying again: the CCM
// must start, not exit as it does for a misconfiguration.
func TestStartupRidesOutAnIronCoreHiccup(t *testing.T) {
	setOutageMode(t, apiproxy.Fail)
	ccm, port, err := stack.StartCCM(ccmBinary, "ccm-startup-hiccup")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ccm.Stop() })
	waitForLogLine(t, ccm, "the CCM to retry its start-up check", "IronCore failed a start-up step; trying again")
	setOutageMode(t, apiproxy.Forward)
	waitForLogLine(t, ccm, "the CCM to start", "Configured IronCore cloud provider")
	waitHealthy(t, port)
}

// TestAHungStartupRequestIsTriedAgain: one of the CCM's first requests to IronCore hangs (the
// proxy holds it a minute, as a lost packet or a stuck API server would): the API discovery that
// building the IronCore cache makes, which takes no context, or the read of the Network. The
// start-up check gives that attempt up in time to try again, and the CCM starts, instead of
// spending its whole start-up budget on one request and exiting (make chaos: "replica ended by
// itself").
func TestAHungStartupRequestIsTriedAgain(t *testing.T) {
	for _, hung := range []struct {
		name, ccm string
		match     func(apiproxy.Request) bool
	}{
		{"the API discovery", "ccm-hung-discovery", func(r apiproxy.Request) bool { return r.Verb == "GET" && r.Resource == "/api" }},
		{"the Network read", "ccm-hung-network", func(r apiproxy.Request) bool { return r.Verb == "get" && strings.HasPrefix(r.Resource, "networks.") }},
	} {
		t.Run(hung.name, func(t *testing.T) {
			var held atomic.Bool
			stack.IronCoreProxy.DelayWhere(func(r apiproxy.Request) bool {
				return hung.match(r) && held.CompareAndSwap(false, true)
			}, time.Minute)
			t.Cleanup(func() { stack.IronCoreProxy.DelayWhere(nil, 0) })
			ccm, port, err := stack.StartCCM(ccmBinary, hung.ccm)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = ccm.Stop() })
			waitForLogLine(t, ccm, "the CCM to start", "Configured IronCore cloud provider")
			if !held.Load() {
				t.Fatalf("%s was not held: the test proves nothing", hung.name)
			}
			waitHealthy(t, port)
		})
	}
}

// TestVersionNamesTheBuild runs --version and --version=raw: both name the commit the binary
// was built from (the test's own checkout) and the versions of the IronCore API and
// k8s.io/cloud-provider, from the build information Go embeds.
func TestVersionNamesTheBuild(t *testing.T) {
	commit := headCommit(t)
	// Standard output only: a binary built with -race logs to standard error first.
	output, err := exec.Command(ccmBinary, "--version").Output()
	if err != nil {
		t.Fatalf("--version: %v", err)
	}
	first, _, _ := strings.Cut(string(output), "\n")
	if !strings.HasPrefix(first, "ironcore-cloud-controller-manager v") || strings.Contains(first, "master") {
		t.Errorf("--version's first line is %q, want this CCM's version", first)
	}
	for _, want := range []string{commit, "ironcore API:   v", "cloud-provider: v0.", "go:             go1."} {
		if !strings.Contains(string(output), want) {
			t.Errorf("--version does not say %q:\n%s", want, output)
		}
	}
	// The k8s.io libraries move together: one version in go.mod, the one --version names.
	k8sVersion := k8sLibrariesVersion(t)
	if want := "cloud-provider: " + k8sVersion + "\n"; !strings.Contains(string(output), want) {
		t.Errorf("--version does not say %q, the version of go.mod's k8s.io libraries:\n%s", want, output)
	}
	raw, err := exec.Command(ccmBinary, "--version=raw").Output()
	if err != nil {
		t.Fatalf("--version=raw: %v", err)
	}
	var info struct {
		Version, Commit string
		Modified        bool
	}
	if err := json.Unmarshal(raw, &info); err != nil {
		t.Fatalf("--version=raw is not JSON: %v\n%s", err, raw)
	}
	// Between tags the version names the commit; the test's checkout is between tags unless
	// HEAD is tagged.
	if info.Commit != commit || !strings.HasPrefix(info.Version, "v") || !strings.Contains(info.Version, commit[:12]) && gitOutput(t, "tag", "--points-at", "HEAD") == "" {
		t.Errorf("--version=raw: %+v, want the version and commit of %s", info, commit)
	}
	if info.Modified != strings.HasSuffix(info.Version, "-dirty") {
		t.Errorf("--version=raw: %+v: a modified tree's version ends in -dirty, and only its", info)
	}
}

// k8sLibrariesVersion is the one version go.mod requires of every k8s.io library released with
// Kubernetes (v0.<minor>.<patch>; klog, utils and kube-openapi have versions of their own); the
// test fails if they differ.
func k8sLibrariesVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.RepoRootForTest(t), "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	release := regexp.MustCompile(`^\s*(?:require\s+)?(k8s\.io/\S+) (v0\.\d+\.\d+)(?:\s|$)`)
	versions := map[string][]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if m := release.FindStringSubmatch(line); m != nil {
			versions[m[2]] = append(versions[m[2]], m[1])
		}
	}
	if len(versions) != 1 {
		t.Fatalf("go.mod requires the k8s.io libraries at %d versions, want one: %v", len(versions), versions)
	}
	for version, modules := range versions {
		if len(modules) < 5 {
			t.Fatalf("go.mod requires only %v at %s; the listing is broken", modules, version)
		}
		return version
	}
	return ""
}

// headCommit is the commit of the checkout the tests and the CCM were built from.
func headCommit(t *testing.T) string {
	t.Helper()
	return gitOutput(t, "rev-parse", "HEAD")
}

// gitOutput runs git in the repository and returns its output, trimmed.
func gitOutput(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = testenv.RepoRootForTest(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out))
}

// waitForLogLine waits up to 30 s for the CCM's log to hold the line, failing the test if the
// CCM exits first.
func waitForLogLine(t *testing.T, ccm *testenv.Process, what, line string) {
	t.Helper()
	testenv.Await(t, context.Background(), 30*time.Second, what, func(context.Context) error {
		select {
		case <-ccm.Exited():
			return fmt.Errorf("it exited (%w):\n%s", ccm.Err(), tail(readLog(ccm), 5))
		default:
		}
		if !strings.Contains(readLog(ccm), line) {
			return errors.New("not yet")
		}
		return nil
	})
}
