package main

import (
	"bytes"
	"context"
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
