package docgen

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/inspect"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbclass"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/nodelabels"
)

// The docs a user reads: the README, the guides, operations and design pages, the references,
// and the benchmark and reliability pages. The run-by-run result files beside those are records
// of their day.
var userDocs = []string{
	"README.md", "docs/*.md", "docs/guides/*.md", "docs/operations/*.md", "docs/design/*.md", "docs/reference/*.md",
	"docs/benchmarks/README.md", "docs/reliability/README.md", "charts/*/values.yaml",
}

// Names in code spans: flags, this CCM's metrics, IronCore label and annotation keys, and
// event reasons (a CamelCase word in a span on a line that speaks of events).
var (
	codeSpan     = regexp.MustCompile("`([^`\n]+)`")
	flagName     = regexp.MustCompile(`(?:^|[^\w-])--([a-z][a-z0-9-]+)`)
	metricName   = regexp.MustCompile(`\bironcore_ccm_[a-z_]+`)
	keyName      = regexp.MustCompile(`\b((?:[a-z0-9-]+\.)*ironcore\.dev/[A-Za-z0-9._-]*[A-Za-z0-9])`)
	reasonName   = regexp.MustCompile(`^[A-Z][a-z]+(?:[A-Z][a-z0-9]*)+$`)
	eventContext = regexp.MustCompile(`(?i)\bevents?\b`)
)

// globalFlags are the flags the upstream command adds beside its option sets.
var globalFlags = []string{"help", "version", "v", "vmodule", "log-flush-frequency", "logging-format", "log-json-info-buffer-size", "log-json-split-stream", "log-text-info-buffer-size", "log-text-split-stream"}

// Names that are not this CCM's keys or events but that the docs name on purpose: IronCore's
// own keys, and the upstream controllers' events.
var (
	otherKeys    = []string{"common.ironcore.dev/ephemeral-managed-by"}
	otherReasons = []string{"EnsuringLoadBalancer", "EnsuredLoadBalancer", "SyncLoadBalancerFailed", "UpdatedLoadBalancer", "DeletingLoadBalancer", "DeletedLoadBalancer", "DeleteLoadBalancerFailed", "UpdateLoadBalancerFailed", "LoadBalancerUpdateFailed", "UnAvailableLoadBalancer", "CreatingRoute", "FailedToCreateRoute", "RouteCreated"}
)

// TestDocsNameOnlyWhatTheCodeHas: every flag, metric, IronCore label or annotation key and event
// reason the user docs name in a code span exists in the code, so that a doc cannot promise a
// flag, metric, key or event that was renamed or never made.
func TestDocsNameOnlyWhatTheCodeHas(t *testing.T) {
	known := knownNames(t)
	files := forEachUserDoc(t, repositoryRoot, func(rel, _, text string) {
		for number, line := range strings.Split(text, "\n") {
			for _, unknown := range unknownNames(line, known) {
				t.Errorf("%s:%d names %s, which the code does not have", rel, number+1, unknown)
			}
		}
	})
	if files < 10 {
		t.Fatalf("found only %d docs; the patterns are broken", files)
	}
}

// forEachUserDoc calls visit with each user doc's path relative to root, its path and its
// text, and returns how many there were.
func forEachUserDoc(t *testing.T, root string, visit func(rel, path, text string)) int {
	t.Helper()
	files := 0
	for _, pattern := range userDocs {
		paths, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range paths {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			rel, err := filepath.Rel(root, path)
			if err != nil {
				t.Fatal(err)
			}
			files++
			visit(rel, path, string(data))
		}
	}
	return files
}

// unknownNames lists what the line names that known lacks.
func unknownNames(line string, known map[string]bool) []string {
	var unknown []string
	for _, span := range codeSpan.FindAllStringSubmatch(line, -1) {
		text := span[1]
		for _, m := range flagName.FindAllStringSubmatch(text, -1) {
			if !known["flag "+m[1]] {
				unknown = append(unknown, "flag --"+m[1])
			}
		}
		for _, m := range metricName.FindAllString(text, -1) {
			if !known["metric "+strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_count"), "_sum")] {
				unknown = append(unknown, "metric "+m)
			}
		}
		for _, m := range keyName.FindAllStringSubmatch(text, -1) {
			if !known["key "+m[1]] && !known["prefix "+keyPrefix(m[1])] {
				unknown = append(unknown, "key "+m[1])
			}
		}
		if reasonName.MatchString(text) && eventContext.MatchString(line) && !known["word "+text] && !known["reason "+text] {
			unknown = append(unknown, "event reason "+text)
		}
	}
	return unknown
}

// knownNames are the names the code has, each with its kind: "flag x", "metric x", "key x",
// "reason x", plus words that are not event reasons (kinds and Go names the docs mention near
// events).
func knownNames(t *testing.T) map[string]bool {
	t.Helper()
	known := map[string]bool{}
	upstream, err := FlagNames()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range append(upstream, globalFlags...) {
		known["flag "+name] = true
	}
	for _, row := range ironCoreFlagRows() {
		known["flag "+strings.Trim(row[0], "`-")] = true
	}
	inspectFlags := pflag.NewFlagSet("inspect", pflag.ContinueOnError)
	inspect.NewOptions().AddFlags(inspectFlags)
	inspectFlags.VisitAll(func(f *pflag.Flag) { known["flag "+f.Name] = true })
	source, err := os.ReadFile(filepath.Join(repositoryRoot, "internal", "metrics", "metrics.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`Name:\s+"([a-z_]+)"`).FindAllStringSubmatch(string(source), -1) {
		known["metric ironcore_ccm_"+m[1]] = true
	}
	for _, key := range AllKeys() {
		known["key "+key.Name] = true
	}
	// IronCore's topology labels are copied whatever their name; the class is a value, not a
	// key, in the same form.
	known["prefix "+nodelabels.TopologyPrefix] = true
	known["key "+lbclass.Name] = true
	for _, key := range otherKeys {
		known["key "+key] = true
	}
	for _, reason := range EventReasons() {
		known["reason "+reason.Reason] = true
	}
	for _, reason := range otherReasons {
		known["reason "+reason] = true
	}
	return known
}

// keyPrefix is the key's prefix with its slash.
func keyPrefix(key string) string {
	prefix, _, _ := strings.Cut(key, "/")
	return prefix + "/"
}

func TestUnknownNames(t *testing.T) {
	known := map[string]bool{"flag use-nic-selector": true, "metric ironcore_ccm_x_seconds": true, "reason LoadBalancerIPIgnored": true, "key cloud-provider.ironcore.dev/retain-load-balancer": true}
	line := "An event `LoadBalancerIPIgnored`, `ExternalTrafficPolicyLocalNotHonoured`; `--use-nic-selector=true`, `--no-such-flag`; " +
		"`ironcore_ccm_x_seconds_bucket`, `ironcore_ccm_y`; `cloud-provider.ironcore.dev/retain-load-balancer: \"true\"`, `cloud-provider.ironcore.dev/nope`"
	got := unknownNames(line, known)
	sort.Strings(got)
	want := []string{"event reason ExternalTrafficPolicyLocalNotHonoured", "flag --no-such-flag", "key cloud-provider.ironcore.dev/nope", "metric ironcore_ccm_y"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("unknownNames = %q, want %q", got, want)
	}
}
