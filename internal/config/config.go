// Package config reads the CCM's cloud-config file and its IronCore-specific flags.
//
// The file format is the reference IronCore CCM's, so an existing file keeps working. Unlike
// the reference, an unknown key stops the CCM: a misspelt key silently ignored would run the
// cluster with a default its operator did not choose. Each error says what to do about the key.
package config

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/nodelabels"
)

// CloudConfig is the content of the file given with --cloud-config. Fields documents its keys.
type CloudConfig struct {
	// NetworkName is the IronCore Network the cluster's Machines are attached to. Required.
	NetworkName string `json:"networkName"`
	// PrefixName is the Prefix that internal load balancers' IPv4 addresses come from.
	PrefixName string `json:"prefixName,omitempty"`
	// IPv6PrefixName is the Prefix that internal load balancers' IPv6 addresses come from.
	IPv6PrefixName string `json:"ipv6PrefixName,omitempty"`
	// ClusterName identifies this cluster on IronCore objects (labels and annotations).
	// Required unless --cluster-name is set.
	ClusterName string `json:"clusterName,omitempty"`
	// ClusterNameAliases are earlier names of this cluster (a reference CCM recorded its
	// --cluster-name on LoadBalancers); LoadBalancers recording one are taken over.
	ClusterNameAliases []string `json:"clusterNameAliases,omitempty"`
	// PodCIDRParentPrefix is the Prefix Nodes' IPv4 pod CIDRs come from; it, or
	// PodCIDRParentPrefixLabels, turns IPv4 pod CIDR allocation on.
	PodCIDRParentPrefix string `json:"podCIDRParentPrefix,omitempty"`
	// PodCIDRParentPrefixLabels select the parent Prefixes instead; another one extends the range.
	PodCIDRParentPrefixLabels map[string]string `json:"podCIDRParentPrefixLabels,omitempty"`
	// PodCIDRMaskSize is the prefix length of each Node's IPv4 pod CIDR.
	PodCIDRMaskSize int `json:"podCIDRMaskSize,omitempty"`
	// The IPv6 equivalents of the three above.
	IPv6PodCIDRParentPrefix       string            `json:"ipv6PodCIDRParentPrefix,omitempty"`
	IPv6PodCIDRParentPrefixLabels map[string]string `json:"ipv6PodCIDRParentPrefixLabels,omitempty"`
	IPv6PodCIDRMaskSize           int               `json:"ipv6PodCIDRMaskSize,omitempty"`
	// NodeLabelsFromMachine are Machine label keys, exact or prefixes ending in "*", copied to Nodes.
	NodeLabelsFromMachine []string `json:"nodeLabelsFromMachine,omitempty"`
}

// Default pod CIDR sizes, those of kube-controller-manager's --node-cidr-mask-size-ipv4/-ipv6.
const (
	DefaultPodCIDRMaskSizeIPv4 = 24
	DefaultPodCIDRMaskSizeIPv6 = 64
)

// PodCIDRFamily is where one IP family's pod CIDRs come from.
type PodCIDRFamily struct {
	Family corev1.IPFamily
	// ParentPrefix names the parent Prefix; ParentLabels select parents instead.
	ParentPrefix string
	ParentLabels map[string]string
	MaskSize     int
	// Keys are the cloud-config keys of the parent and the mask size, for messages.
	ParentKey, MaskSizeKey string
}

// podCIDRSource is one IP family's pod CIDR keys as the file gives them.
type podCIDRSource struct {
	family                        corev1.IPFamily
	prefixKey, labelsKey, sizeKey string
	prefix                        string
	labels                        map[string]string
	size, bits, defaultSize       int
}

func (c *CloudConfig) podCIDRSources() []podCIDRSource {
	return []podCIDRSource{
		{corev1.IPv4Protocol, "podCIDRParentPrefix", "podCIDRParentPrefixLabels", "podCIDRMaskSize",
			c.PodCIDRParentPrefix, c.PodCIDRParentPrefixLabels, c.PodCIDRMaskSize, 32, DefaultPodCIDRMaskSizeIPv4},
		{corev1.IPv6Protocol, "ipv6PodCIDRParentPrefix", "ipv6PodCIDRParentPrefixLabels", "ipv6PodCIDRMaskSize",
			c.IPv6PodCIDRParentPrefix, c.IPv6PodCIDRParentPrefixLabels, c.IPv6PodCIDRMaskSize, 128, DefaultPodCIDRMaskSizeIPv6},
	}
}

// PodCIDRFamilies are the IP families whose pod CIDRs the CCM allocates, IPv4 first (the order
// of a dual-stack Node's spec.podCIDRs); none when pod CIDR allocation is off.
func (c *CloudConfig) PodCIDRFamilies() []PodCIDRFamily {
	var families []PodCIDRFamily
	for _, s := range c.podCIDRSources() {
		f := PodCIDRFamily{Family: s.family, ParentPrefix: s.prefix, ParentLabels: s.labels, MaskSize: cmp.Or(s.size, s.defaultSize),
			ParentKey: s.prefixKey, MaskSizeKey: s.sizeKey}
		switch {
		case s.prefix != "":
		case len(s.labels) > 0:
			f.ParentKey = s.labelsKey
		default:
			continue
		}
		families = append(families, f)
	}
	return families
}

func (c *CloudConfig) validatePodCIDRs() []error {
	var errs []error
	for _, f := range c.podCIDRSources() {
		switch {
		case f.prefix != "" && len(f.labels) > 0:
			errs = append(errs, fmt.Errorf("%s and %s are alternatives: set one", f.prefixKey, f.labelsKey))
		case f.prefix == "" && len(f.labels) == 0 && f.size != 0:
			errs = append(errs, fmt.Errorf("%s is set without %s or %s, which turn pod CIDR allocation on", f.sizeKey, f.prefixKey, f.labelsKey))
		}
		if f.prefix != "" {
			if msgs := validation.IsDNS1123Subdomain(f.prefix); len(msgs) > 0 {
				errs = append(errs, fmt.Errorf("%s %q is not a valid object name: %s", f.prefixKey, f.prefix, strings.Join(msgs, "; ")))
			}
		}
		for key, value := range f.labels {
			for _, msg := range append(validation.IsQualifiedName(key), validation.IsValidLabelValue(value)...) {
				errs = append(errs, fmt.Errorf("%s: %q: %q is not a valid label: %s", f.labelsKey, key, value, msg))
			}
		}
		if f.size != 0 && (f.size < 1 || f.size > f.bits) {
			errs = append(errs, fmt.Errorf("%s %d is not a prefix length between 1 and %d", f.sizeKey, f.size, f.bits))
		}
	}
	return errs
}

// ReadCloudConfig reads and strictly decodes a cloud-config file. It does not validate values;
// call Validate once the cluster name has been resolved.
func ReadCloudConfig(path string) (*CloudConfig, error) {
	if path == "" {
		return nil, errors.New("no cloud-config file given: set --cloud-config")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read cloud-config: %w", err)
	}
	cfg, err := ParseCloudConfig(data)
	if err != nil {
		return nil, fmt.Errorf("cloud-config %s: %w", path, err)
	}
	return cfg, nil
}

// ParseCloudConfig decodes a cloud-config document. Every unknown key is reported, each with
// the known key it most likely meant.
func ParseCloudConfig(data []byte) (*CloudConfig, error) {
	jsonData, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	cfg := &CloudConfig{}
	if bytes.Equal(bytes.TrimSpace(jsonData), []byte("null")) {
		return cfg, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(jsonData, &fields); err != nil {
		return nil, errors.New("not a YAML mapping of keys to values")
	}
	if err := checkKeys(fields); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(jsonData, cfg); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			key, _, _ := strings.Cut(typeErr.Field, ".")
			return nil, fmt.Errorf("key %q must be a %s, not a %s", key, yamlType(key), typeErr.Value)
		}
		return nil, err
	}
	return cfg, nil
}

func checkKeys(fields map[string]json.RawMessage) error {
	known := knownKeys()
	var unknown []string
	for key := range fields {
		if !slices.Contains(known, key) {
			unknown = append(unknown, key)
		}
	}
	slices.Sort(unknown)
	errs := make([]error, 0, len(unknown))
	for _, key := range unknown {
		if instead, ok := UnsupportedReferenceKeys()[key]; ok {
			errs = append(errs, fmt.Errorf("key %q of the reference CCM is not supported: %s", key, instead))
		} else if suggestion := closestKey(key); suggestion != "" {
			errs = append(errs, fmt.Errorf("unknown key %q (did you mean %q?): correct it, or remove it if it is meant for another CCM", key, suggestion))
		} else {
			errs = append(errs, fmt.Errorf("unknown key %q (known keys: %s): it may be misspelt, or be meant for a newer version of this CCM or another CCM; remove it", key, strings.Join(known, ", ")))
		}
	}
	return errors.Join(errs...)
}

// UnsupportedReferenceKeys are reference CCM keys this CCM does not read, each with what to set
// instead: they come from a configuration that worked, not from a typing mistake.
func UnsupportedReferenceKeys() map[string]string {
	return map[string]string{
		// Newer reference versions take a list of Prefixes; this CCM takes one per IP family.
		"prefixNames": "set prefixName to the IPv4 Prefix and ipv6PrefixName to the IPv6 Prefix that Internal LoadBalancers' addresses are allocated from, and remove prefixNames",
	}
}

// Validate reports every problem with the configuration at once.
func (c *CloudConfig) Validate() error {
	var errs []error
	if c.NetworkName == "" {
		errs = append(errs, errors.New("networkName is required"))
	} else if msgs := validation.IsDNS1123Subdomain(c.NetworkName); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("networkName %q is not a valid object name: %s", c.NetworkName, strings.Join(msgs, "; ")))
	}
	for _, prefix := range []struct{ key, name string }{{"prefixName", c.PrefixName}, {"ipv6PrefixName", c.IPv6PrefixName}} {
		if prefix.name == "" {
			continue
		}
		if msgs := validation.IsDNS1123Subdomain(prefix.name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s %q is not a valid object name: %s", prefix.key, prefix.name, strings.Join(msgs, "; ")))
		}
	}
	if c.ClusterName == "" {
		errs = append(errs, errors.New("clusterName is required (or set --cluster-name)"))
	} else if msgs := validation.IsValidLabelValue(c.ClusterName); len(msgs) > 0 {
		// The name is written as a label value on Machines and NetworkInterfaces.
		errs = append(errs, fmt.Errorf("clusterName %q is not a valid label value: %s", c.ClusterName, strings.Join(msgs, "; ")))
	}
	for i, alias := range c.ClusterNameAliases {
		switch alias {
		case "":
			errs = append(errs, fmt.Errorf("clusterNameAliases[%d] is empty", i))
		case c.ClusterName:
			errs = append(errs, fmt.Errorf("clusterNameAliases[%d] %q is clusterName itself; list only earlier names", i, alias))
		}
	}
	errs = append(errs, c.validatePodCIDRs()...)
	if _, err := nodelabels.ParseAllowList(c.NodeLabelsFromMachine); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// NodeLabelAllowList is nodeLabelsFromMachine read; Validate reports what is wrong with it.
func (c *CloudConfig) NodeLabelAllowList() nodelabels.AllowList {
	allow, _ := nodelabels.ParseAllowList(c.NodeLabelsFromMachine)
	return allow
}

// ResolveClusterName settles the cluster name from clusterName and --cluster-name. The file
// wins, because the reference CCM labelled IronCore objects with it; a differing flag is an
// error, not a silent split between what labels Machines and what selects targets.
func (c *CloudConfig) ResolveClusterName(flagValue string, flagSet bool) error {
	switch {
	case !flagSet || flagValue == "":
		return nil
	case c.ClusterName == "":
		c.ClusterName = flagValue
		return nil
	case c.ClusterName != flagValue:
		return fmt.Errorf("cloud-config clusterName %q and --cluster-name %q differ: IronCore objects are labelled with clusterName, so remove --cluster-name "+
			"or make it equal; if a reference CCM ran with --cluster-name %q, add %q to the cloud-config's clusterNameAliases, so that this CCM takes over the LoadBalancers it made",
			c.ClusterName, flagValue, flagValue, flagValue)
	default:
		return nil
	}
}

// closestKey returns the known key that key most likely misspells, or "".
func closestKey(key string) string {
	best, bestDistance := "", 3
	for _, known := range knownKeys() {
		if strings.EqualFold(known, key) {
			return known
		}
		if d := editDistance(strings.ToLower(known), strings.ToLower(key)); d < bestDistance {
			best, bestDistance = known, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	previous := make([]int, len(b)+1)
	current := make([]int, len(b)+1)
	for j := range previous {
		previous[j] = j
	}
	for i := 1; i <= len(a); i++ {
		current[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			current[j] = min(previous[j]+1, current[j-1]+1, previous[j-1]+cost)
		}
		previous, current = current, previous
	}
	return previous[len(b)]
}
