package config

import (
	"strings"
	"testing"
)

// FuzzParseCloudConfig feeds the decoder and the validation arbitrary documents: they must not
// panic, and every problem they report must name a key of the file (or say the document is
// not YAML, or not a mapping).
func FuzzParseCloudConfig(f *testing.F) {
	for _, seed := range []string{
		"networkName: net\nclusterName: c\n",
		"networkName: net\nclusterName: c\npodCIDRParentPrefix: pods\npodCIDRMaskSize: 24\nipv6PodCIDRParentPrefixLabels: {a: b}\n",
		"netwrokName: x\n", "prefixNames: [a]\n", "- a\n", "networkName: [1]\n", "clusterNameAliases: ['', c]\nclusterName: c\n",
		"podCIDRMaskSize: 99\n", "podCIDRParentPrefixLabels: {'bad key': v}\n", "{", "", "null",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseCloudConfig(data)
		if err != nil {
			requireNamesAKey(t, data, err, "not valid YAML", "not a YAML mapping")
			return
		}
		if err := cfg.Validate(); err != nil {
			requireNamesAKey(t, data, err)
		}
		_ = cfg.PodCIDRFamilies()
	})
}

// requireNamesAKey fails unless every line of err names a cloud-config key or one of the other
// phrases.
func requireNamesAKey(t *testing.T, data []byte, err error, others ...string) {
	t.Helper()
	for _, line := range strings.Split(err.Error(), "\n") {
		named := false
		for _, phrase := range append(knownKeys(), others...) {
			if strings.Contains(line, phrase) {
				named = true
				break
			}
		}
		if !named {
			t.Fatalf("for %q the problem %q names no key", data, line)
		}
	}
}
