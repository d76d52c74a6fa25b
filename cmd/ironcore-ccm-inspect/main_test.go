package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFlagErrors checks that wrong flags and files end the command with one clear line and a
// non-zero status, before anything is contacted: no server runs here.
func TestFlagErrors(t *testing.T) {
	dir := t.TempDir()
	cloudConfig := filepath.Join(dir, "cloud-config.yaml")
	writeFile(t, cloudConfig, "networkName: net\nclusterName: lab\n")
	noNamespace := filepath.Join(dir, "ironcore.kubeconfig")
	writeFile(t, noNamespace, `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`)
	for _, tc := range []struct {
		name   string
		args   []string
		status int
		want   string
	}{
		{"nothing given", nil, 2, "--ironcore-kubeconfig is required; --cloud-config is required"},
		{"unknown output", []string{"--ironcore-kubeconfig=k", "--cloud-config=c", "--output=yaml"}, 2, `--output must be table or json, not "yaml"`},
		{"unknown flag", []string{"--bogus"}, 2, "unknown flag: --bogus (see --help)"},
		{"argument", []string{"--ironcore-kubeconfig=k", "--cloud-config=c", "nodes"}, 2, `unexpected arguments ["nodes"]`},
		{"missing cloud-config", []string{"--ironcore-kubeconfig=" + noNamespace, "--cloud-config=" + filepath.Join(dir, "missing.yaml")}, 1, "read cloud-config: open "},
		{"cluster names differ", []string{"--ironcore-kubeconfig=" + noNamespace, "--cloud-config=" + cloudConfig, "--cluster-name=other"}, 1, `clusterName "lab" and --cluster-name "other" differ`},
		{"no IronCore namespace", []string{"--ironcore-kubeconfig=" + noNamespace, "--cloud-config=" + cloudConfig}, 1, `context "x" sets no namespace`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			status := run(context.Background(), tc.args, &stdout, &stderr)
			if status != tc.status {
				t.Errorf("exit status %d, want %d", status, tc.status)
			}
			if stdout.Len() > 0 {
				t.Errorf("output on stdout: %q", stdout.String())
			}
			lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
			if len(lines) != 1 || !strings.HasPrefix(lines[0], commandName+": ") || !strings.Contains(lines[0], tc.want) {
				t.Errorf("stderr %q, want one line with %q", stderr.String(), tc.want)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if status := run(context.Background(), []string{"--help"}, &stdout, &stderr); status != 0 {
		t.Errorf("exit status %d, want 0", status)
	}
	for _, flag := range []string{"--kubeconfig", "--ironcore-kubeconfig", "--cloud-config", "--cluster-name", "--output"} {
		if !strings.Contains(stdout.String(), flag) {
			t.Errorf("--help does not mention %s:\n%s", flag, stdout.String())
		}
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestADryRunReportIsPrintedDeletionsFirst reads a dry run's report from where it is served
// and prints it by section, deletions first, with the reason a Node leaves a routing; wrong
// flags and an unreachable report end with one line.
func TestADryRunReportIsPrintedDeletionsFirst(t *testing.T) {
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"writes":[
			{"api":"ironcore","verb":"patch","resource":"loadbalancerroutings.networking.ironcore.dev","namespace":"tenant","name":"lb",
			 "changes":["destinations: 2 -> 1 targets; in: none; out: nic-a"],"reason":"the targets of Service default/web: 1 Nodes",
			 "excluded":{"nic-a":"Node a: its Ready condition has been False for 1h0m0s (grace period 1m0s)"},"attempts":1},
			{"api":"ironcore","verb":"delete","resource":"loadbalancers.networking.ironcore.dev","namespace":"tenant","name":"old","changes":["deleted"],"attempts":3}]}`))
	}))
	defer server.Close()
	var stdout, stderr bytes.Buffer
	if status := run(context.Background(), []string{"dry-run", "--url=" + server.URL}, &stdout, &stderr); status != 0 {
		t.Fatalf("status %d: %s", status, stderr.String())
	}
	out := stdout.String()
	deletion := strings.Index(out, "- delete loadbalancers.networking.ironcore.dev tenant/old (tried 3 times)")
	routing := strings.Index(out, "- patch loadbalancerroutings.networking.ironcore.dev tenant/lb")
	reason := strings.Index(out, "nic-a out: Node a: its Ready condition has been False")
	if deletion < 0 || routing < deletion || reason < routing {
		t.Errorf("the report does not list the deletion, then the routing with the Node out and why:\n%s", out)
	}

	for _, tc := range []struct {
		args   []string
		status int
		want   string
	}{
		{[]string{"dry-run", "--output=yaml"}, 2, `--output="yaml"`},
		{[]string{"dry-run", "--url=http://127.0.0.1:1/dry-run"}, 1, "is a CCM with --dry-run serving it there?"},
	} {
		stdout.Reset()
		stderr.Reset()
		if status := run(context.Background(), tc.args, &stdout, &stderr); status != tc.status || !strings.Contains(stderr.String(), tc.want) || strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("%q: status %d, stderr %q; want %d and one line with %q", tc.args, status, stderr.String(), tc.status, tc.want)
		}
	}
}
