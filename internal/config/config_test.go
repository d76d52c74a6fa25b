package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestParseCloudConfigReadsTheReferenceFormat(t *testing.T) {
	cfg, err := ParseCloudConfig([]byte("networkName: my-network\nprefixName: my-prefix\nclusterName: my-cluster\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := CloudConfig{NetworkName: "my-network", PrefixName: "my-prefix", ClusterName: "my-cluster"}
	if !reflect.DeepEqual(*cfg, want) {
		t.Fatalf("got %+v, want %+v", *cfg, want)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
}

func TestParseCloudConfigNamesEveryUnknownKey(t *testing.T) {
	_, err := ParseCloudConfig([]byte("networkname: n\nclustrName: c\nzone: z\n"))
	if err == nil {
		t.Fatal("want an error")
	}
	for _, want := range []string{
		`unknown key "networkname" (did you mean "networkName"?): correct it, or remove it`,
		`unknown key "clustrName" (did you mean "clusterName"?)`,
		`unknown key "zone" (known keys: networkName, prefixName, ipv6PrefixName, clusterName, clusterNameAliases, podCIDRParentPrefix, podCIDRParentPrefixLabels, podCIDRMaskSize, ipv6PodCIDRParentPrefix, ipv6PodCIDRParentPrefixLabels, ipv6PodCIDRMaskSize, nodeLabelsFromMachine): ` +
			`it may be misspelt, or be meant for a newer version of this CCM or another CCM; remove it`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

// TestParseCloudConfigSaysWhatToUseInsteadOfReferenceKeys: a newer reference CCM's prefixNames
// is still an error, not silently ignored, but one that says what to write instead, rather
// than suggesting its near namesake prefixName as a spelling fix.
func TestParseCloudConfigSaysWhatToUseInsteadOfReferenceKeys(t *testing.T) {
	_, err := ParseCloudConfig([]byte("networkName: my-network\nclusterName: c\nprefixNames: [v4-prefix, v6-prefix]\n"))
	if err == nil {
		t.Fatal("want an error: prefixNames must not be silently ignored")
	}
	want := `key "prefixNames" of the reference CCM is not supported: set prefixName to the IPv4 Prefix and ipv6PrefixName to the IPv6 Prefix`
	if !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "did you mean") {
		t.Fatalf("error %q, want it to contain %q and no spelling suggestion", err, want)
	}
	for key := range UnsupportedReferenceKeys() {
		if yamlType(key) != "" {
			t.Errorf("%s is listed as unsupported, but CloudConfig reads it", key)
		}
	}
}

func TestParseCloudConfigReadsClusterNameAliases(t *testing.T) {
	cfg, err := ParseCloudConfig([]byte("networkName: my-network\nclusterName: new\nclusterNameAliases: [old, older]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"old", "older"}; !reflect.DeepEqual(cfg.ClusterNameAliases, want) {
		t.Fatalf("aliases %q, want %q", cfg.ClusterNameAliases, want)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	for doc, want := range map[string]string{
		"clusterNameAliases: old\n":  `key "clusterNameAliases" must be a list of strings, not a string`,
		"clusterNameAliases: [1]\n":  `key "clusterNameAliases" must be a list of strings, not a number`,
		"clusterNameAliases: {a: b}": `key "clusterNameAliases" must be a list of strings, not a object`,
	} {
		if _, err := ParseCloudConfig([]byte(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseCloudConfig(%q) error = %v, want it to contain %q", doc, err, want)
		}
	}
}

func TestParseCloudConfigRejectsWrongTypesAndNonMappings(t *testing.T) {
	for doc, want := range map[string]string{
		"networkName: [a, b]\n": `key "networkName" must be a string`,
		"- networkName\n":       "not a YAML mapping",
		"networkName: 'a\n":     "not valid YAML",
	} {
		_, err := ParseCloudConfig([]byte(doc))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseCloudConfig(%q) error = %v, want it to contain %q", doc, err, want)
		}
	}
}

func TestValidateReportsAllProblemsAtOnce(t *testing.T) {
	cfg := &CloudConfig{PrefixName: "Bad_Prefix", ClusterName: "has spaces", ClusterNameAliases: []string{"old", "", "has spaces"}}
	err := cfg.Validate()
	if err == nil {
		t.Fatal("want an error")
	}
	for _, want := range []string{
		"networkName is required", `prefixName "Bad_Prefix"`, `clusterName "has spaces"`,
		"clusterNameAliases[1] is empty", `clusterNameAliases[2] "has spaces" is clusterName itself`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

func TestResolveClusterName(t *testing.T) {
	for _, tc := range []struct {
		name, file, flag string
		flagSet          bool
		want             string
		wantErr          bool
	}{
		{name: "file only", file: "a", want: "a"},
		{name: "flag at its default is ignored", file: "a", flag: "kubernetes", want: "a"},
		{name: "flag only", flag: "b", flagSet: true, want: "b"},
		{name: "both equal", file: "a", flag: "a", flagSet: true, want: "a"},
		{name: "both differ", file: "a", flag: "b", flagSet: true, wantErr: true},
		{name: "neither", want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &CloudConfig{NetworkName: "n", ClusterName: tc.file}
			err := cfg.ResolveClusterName(tc.flag, tc.flagSet)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("want an error, got cluster name %q", cfg.ClusterName)
				}
				// The way out for a reference deployment whose two names differed.
				if want := `add "` + tc.flag + `" to the cloud-config's clusterNameAliases`; !strings.Contains(err.Error(), want) {
					t.Fatalf("error %q does not contain %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.ClusterName != tc.want {
				t.Fatalf("cluster name = %q, want %q", cfg.ClusterName, tc.want)
			}
		})
	}
}

func TestIronCoreRESTConfigRequiresANamespace(t *testing.T) {
	dir := t.TempDir()
	write := func(namespace string) string {
		path := filepath.Join(dir, "kubeconfig-"+namespace)
		doc := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: ctx, context: {cluster: c, user: u, namespace: "` + namespace + `"}}]
current-context: ctx
`
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}

	opts := NewOptions()
	opts.IronCoreKubeconfig = write("tenant-a")
	cfg, namespace, err := opts.IronCoreRESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	if namespace != "tenant-a" || cfg.Host != "https://127.0.0.1:1" || cfg.QPS != opts.IronCoreQPS || cfg.Burst != opts.IronCoreBurst {
		t.Fatalf("got namespace %q host %q qps %v burst %d", namespace, cfg.Host, cfg.QPS, cfg.Burst)
	}

	opts.IronCoreKubeconfig = write("")
	if _, _, err := opts.IronCoreRESTConfig(); err == nil || !strings.Contains(err.Error(), "sets no namespace") {
		t.Fatalf("error = %v, want one about the missing namespace", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	opts := NewOptions()
	opts.IronCoreQPS = 0
	opts.OrphanCleanup = "sometimes"
	err := opts.Validate()
	for _, want := range []string{"--ironcore-kubeconfig is required", "--ironcore-api-qps", `--orphan-load-balancer-cleanup must be delete, report or off, not "sometimes"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error = %v, want it to contain %q", err, want)
		}
	}
}

func TestPodCIDRFamilies(t *testing.T) {
	cfg, err := ParseCloudConfig([]byte("networkName: net\nclusterName: cl\nipv6PodCIDRParentPrefix: pods-v6\npodCIDRParentPrefixLabels: {pool: pods}\npodCIDRMaskSize: 26\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	families := cfg.PodCIDRFamilies()
	if len(families) != 2 {
		t.Fatalf("families = %+v, want IPv4 and IPv6", families)
	}
	v4, v6 := families[0], families[1]
	if v4.Family != corev1.IPv4Protocol || v4.ParentLabels["pool"] != "pods" || v4.MaskSize != 26 || v4.ParentKey != "podCIDRParentPrefixLabels" {
		t.Errorf("IPv4 = %+v", v4)
	}
	if v6.Family != corev1.IPv6Protocol || v6.ParentPrefix != "pods-v6" || v6.MaskSize != DefaultPodCIDRMaskSizeIPv6 || v6.ParentKey != "ipv6PodCIDRParentPrefix" {
		t.Errorf("IPv6 = %+v", v6)
	}
	if got := (&CloudConfig{}).PodCIDRFamilies(); len(got) != 0 {
		t.Errorf("without the keys, families = %+v, want none", got)
	}
}

func TestPodCIDRKeysAreValidated(t *testing.T) {
	cfg := &CloudConfig{NetworkName: "n", ClusterName: "c",
		PodCIDRParentPrefix: "pods", PodCIDRParentPrefixLabels: map[string]string{"a": "b"}, PodCIDRMaskSize: 33,
		IPv6PodCIDRMaskSize: 64, IPv6PodCIDRParentPrefixLabels: nil}
	err := cfg.Validate()
	for _, want := range []string{
		"podCIDRParentPrefix and podCIDRParentPrefixLabels are alternatives",
		"podCIDRMaskSize 33 is not a prefix length between 1 and 32",
		"ipv6PodCIDRMaskSize is set without ipv6PodCIDRParentPrefix",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not contain %q", err, want)
		}
	}
	cfg = &CloudConfig{NetworkName: "n", ClusterName: "c", IPv6PodCIDRParentPrefixLabels: map[string]string{"bad key!": "v"}}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `ipv6PodCIDRParentPrefixLabels: "bad key!"`) {
		t.Errorf("a bad label key: error %v", err)
	}
	if _, err := ParseCloudConfig([]byte("podCIDRMaskSize: twenty\n")); err == nil || !strings.Contains(err.Error(), `key "podCIDRMaskSize" must be a int`) {
		t.Errorf("a mask size that is not a number: error %v", err)
	}
}
