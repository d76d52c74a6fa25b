// Command helm renders the Helm chart into the plain manifests under deploy/kustomize, so the
// chart is the one source of both. With -check it only reports whether they are up to date.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"sigs.k8s.io/yaml"
)

// rendering is one generated file: the chart with some values, optionally only some templates.
type rendering struct {
	file     string
	values   map[string]any
	only     []string
	validate bool // only render, to prove the values work; write nothing
}

func renderings() []rendering {
	return []rendering{
		{file: "deploy/kustomize/target/ironcore-cloud-controller-manager.yaml", values: map[string]any{}},
		{file: "deploy/kustomize/ironcore/rbac.yaml", values: map[string]any{
			"ironcoreRBAC": map[string]any{"render": true},
		}, only: []string{"templates/ironcore-rbac.yaml"}},
		{file: "every optional part", validate: true, values: map[string]any{
			"useServiceAccountCredentials": true,
			"routes":                       map[string]any{"clusterCIDR": "10.244.0.0/16"},
			"metrics": map[string]any{
				"serviceMonitor": map[string]any{"enabled": true},
				"podMonitor":     map[string]any{"enabled": true, "tokenSecret": map[string]any{"name": "prometheus-token"}},
			},
		}},
		{file: "a dry run", validate: true, values: map[string]any{
			"replicas": 1,
			"dryRun":   map[string]any{"enabled": true},
		}},
	}
}

func main() {
	root := flag.String("root", "../../..", "the repository's root")
	check := flag.Bool("check", false, "only check that the rendered files are up to date")
	flag.Parse()
	if err := run(*root, *check); err != nil {
		fmt.Fprintf(os.Stderr, "render the chart: %v\n", err)
		os.Exit(1)
	}
}

func run(root string, check bool) error {
	chart, err := loader.Load(filepath.Join(root, "charts/ironcore-cloud-controller-manager"))
	if err != nil {
		return err
	}
	var stale []string
	for _, r := range renderings() {
		values, err := chartutil.ToRenderValues(chart, r.values, chartutil.ReleaseOptions{
			Name: "ironcore-cloud-controller-manager", Namespace: "kube-system", IsInstall: true,
		}, chartutil.DefaultCapabilities)
		if err != nil {
			return fmt.Errorf("%s: %w", r.file, err)
		}
		files, err := engine.Render(chart, values)
		if err != nil {
			return fmt.Errorf("%s: %w", r.file, err)
		}
		manifest, err := join(files, r.only)
		if err != nil {
			return fmt.Errorf("%s: %w", r.file, err)
		}
		if r.validate {
			continue
		}
		path := filepath.Join(root, r.file)
		current, _ := os.ReadFile(path)
		if bytes.Equal(current, manifest) {
			continue
		}
		if check {
			stale = append(stale, r.file)
			continue
		}
		if err := os.WriteFile(path, manifest, 0o644); err != nil {
			return err
		}
		fmt.Printf("wrote %s\n", r.file)
	}
	if len(stale) > 0 {
		return fmt.Errorf("%s out of date with the chart: run go generate ./deploy", strings.Join(stale, ", "))
	}
	return nil
}

// join puts the rendered templates into one multi-document YAML file, in template order, each
// checked to be valid YAML.
func join(files map[string]string, only []string) ([]byte, error) {
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	var out bytes.Buffer
	out.WriteString("# Rendered from charts/ironcore-cloud-controller-manager by go generate ./deploy; do not edit.\n")
	for _, name := range names {
		template := strings.TrimPrefix(name, "ironcore-cloud-controller-manager/")
		if len(only) > 0 && !contains(only, template) {
			continue
		}
		for _, doc := range strings.Split(files[name], "\n---\n") {
			doc = strings.TrimSpace(doc)
			if doc == "" || strings.Trim(doc, "-\n ") == "" {
				continue
			}
			var obj map[string]any
			if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
				return nil, fmt.Errorf("%s: %w", template, err)
			}
			if len(obj) == 0 {
				continue // only comments
			}
			fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", template, doc)
		}
	}
	return out.Bytes(), nil
}

func contains(list []string, s string) bool {
	for _, item := range list {
		if item == s {
			return true
		}
	}
	return false
}
