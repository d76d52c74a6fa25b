package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/deploy"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// TestRenderedManifestsPassServerSideDryRun validates every object rendered from the Helm
// chart against the real API servers of both sides, without creating anything.
func TestRenderedManifestsPassServerSideDryRun(t *testing.T) {
	ctx := context.Background()
	for _, side := range []struct {
		name      string
		cluster   *testenv.Cluster
		manifest  []byte
		namespace string
	}{
		{"target cluster", stack.Target, deploy.TargetManifests, ""},
		{"IronCore", stack.IronCore, deploy.IronCoreRBAC, stack.Namespace},
	} {
		objects, err := testenv.Manifests(side.manifest)
		if err != nil {
			t.Fatal(err)
		}
		if len(objects) == 0 {
			t.Fatalf("%s: no objects rendered", side.name)
		}
		for _, obj := range objects {
			if side.namespace != "" && obj.GetNamespace() != "" {
				obj.SetNamespace(side.namespace)
			}
			// The stack already holds the CCM's roles, so an apply (create or update)
			// rather than a create.
			obj.SetManagedFields(nil)
			if err := side.cluster.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.DryRunAll, client.FieldOwner("dry-run-test"), client.ForceOwnership); err != nil {
				t.Errorf("%s: %s %s/%s: %v", side.name, obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
			}
		}
	}
}

// TestMetricsAreServedToAuthorizedScrapers scrapes /metrics as an identity bound to the
// chart's metrics reader role, after the CCM provisioned a load balancer and a route, and
// checks that anonymous scrapers are refused.
func TestMetricsAreServedToAuthorizedScrapers(t *testing.T) {
	ctx := context.Background()
	_, port := startCCMOnPort(t, "ccm-metrics", routeArgs()...)
	runningMachine(t, "metrics-worker", testenv.MachineOptions{})
	createNode(t, "metrics-worker", testenv.NodeOptions{PodCIDRs: []string{"10.244.200.0/24"}})
	waitForNode(t, "metrics-worker", "Node metrics-worker to be initialized", initialized)
	service := createService(t, "metrics-service", testenv.ServiceOptions{})
	waitForIngress(t, service, anyIngress)
	testenv.Await(t, ctx, waitTimeout, "the route of metrics-worker", func(ctx context.Context) error {
		prefixes, err := nicPrefixes(ctx, "metrics-worker")
		if err != nil {
			return err
		}
		if len(prefixes) == 0 {
			return fmt.Errorf("no prefixes yet")
		}
		return nil
	})

	url := "https://127.0.0.1:" + strconv.Itoa(port) + "/metrics"
	if status, _ := scrape(t, url, ""); status != http.StatusForbidden && status != http.StatusUnauthorized {
		t.Errorf("anonymous scrape: status %d, want 401 or 403", status)
	}
	token := metricsReaderToken(t)
	status, body := scrape(t, url, token)
	if status != http.StatusOK {
		t.Fatalf("scrape as the metrics reader: status %d\n%s", status, body)
	}
	samples := parseSamples(body)
	for _, want := range []struct {
		name   string
		labels []string
	}{
		{"ironcore_ccm_ironcore_api_requests_total", []string{`code="200"`, `resource="networks.networking.ironcore.dev"`, `verb="get"`}},
		{"ironcore_ccm_ironcore_api_requests_total", []string{`resource="loadbalancers.networking.ironcore.dev"`, `verb="patch"`}}, // 201 when created
		{"ironcore_ccm_ironcore_api_request_duration_seconds_count", []string{`verb="patch"`}},
		{"ironcore_ccm_load_balancer_provisioning_duration_seconds_count", []string{`type="public"`}},
		{"ironcore_ccm_route_operations_total", []string{`operation="create"`, `result="changed"`}},
		{"ironcore_ccm_build_info", []string{`commit="` + headCommit(t) + `"`, `ironcore_api="v`}},
	} {
		if total := sum(samples, want.name, want.labels...); total < 1 {
			t.Errorf("%s%v: %v, want at least 1", want.name, want.labels, total)
		}
	}
}

// metricsReaderToken returns a token of a new ServiceAccount bound to the chart's metrics
// reader ClusterRole, as a Prometheus would be.
func metricsReaderToken(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	account := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "metrics-scraper"}}
	if err := stack.Target.Client.Create(ctx, account); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-scraper"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "ironcore:cloud-controller-manager:metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "default", Name: "metrics-scraper"}},
	}
	if err := stack.Target.Client.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	token, err := stack.TargetClientset.CoreV1().ServiceAccounts("default").CreateToken(ctx, account.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return token.Status.Token
}

func scrape(t *testing.T, url, token string) (int, string) {
	t.Helper()
	// The CCM serves a self-signed certificate in the tests.
	httpClient := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// parseSamples maps each sample line of the Prometheus text format (name{labels}) to its value.
func parseSamples(body string) map[string]float64 {
	samples := map[string]float64{}
	scanner := bufio.NewScanner(strings.NewReader(body))
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	for scanner.Scan() {
		line := scanner.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		separator := strings.LastIndexByte(line, ' ')
		if separator < 0 {
			continue
		}
		if value, err := strconv.ParseFloat(line[separator+1:], 64); err == nil {
			samples[line[:separator]] = value
		}
	}
	return samples
}

// sum adds the samples of the metric whose labels include all of labels.
func sum(samples map[string]float64, name string, labels ...string) float64 {
	total := 0.0
	for series, value := range samples {
		metric, rest, _ := strings.Cut(series, "{")
		if metric != name {
			continue
		}
		matches := true
		for _, label := range labels {
			matches = matches && strings.Contains(rest, label)
		}
		if matches {
			total += value
		}
	}
	return total
}
