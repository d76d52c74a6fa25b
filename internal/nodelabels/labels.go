// Package nodelabels keeps on each Node the labels it gets from IronCore: the MachinePool's
// topology labels beyond zone and region, and the Machine labels that the cloud-config's
// nodeLabelsFromMachine allows. The CCM owns these keys on the Node (Owns): one the Machine
// loses is removed, and a label with another key is never touched.
package nodelabels

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
)

// TopologyPrefix is the prefix of IronCore's topology labels on MachinePools. Zone and region
// become the Node's topology.kubernetes.io labels upstream; the others are copied as they are.
const TopologyPrefix = "topology.ironcore.dev/"

// AllowList is the Machine label keys copied to Nodes: exact keys, and prefixes (an entry
// ending in "*").
type AllowList struct {
	exact    []string
	prefixes []string
}

// ParseAllowList reads the cloud-config's nodeLabelsFromMachine. A key Kubernetes reserves (under
// kubernetes.io or k8s.io, such as node-role.kubernetes.io/), a key that is not a label key, or
// an empty prefix is an error naming the entry.
func ParseAllowList(entries []string) (AllowList, error) {
	var allow AllowList
	for i, entry := range entries {
		prefix, isPrefix := strings.CutSuffix(entry, "*")
		example := prefix
		if isPrefix {
			example += "x" // what a key it matches looks like, to validate
		}
		if problems := validation.IsQualifiedName(example); prefix == "" || len(problems) > 0 {
			return AllowList{}, fmt.Errorf("nodeLabelsFromMachine[%d] %q is not a label key or a prefix of one ending in *: %s", i, entry, strings.Join(problems, "; "))
		}
		if domain, reserved := reservedDomain(prefix); reserved {
			return AllowList{}, fmt.Errorf("nodeLabelsFromMachine[%d] %q: keys under %s are reserved for Kubernetes and are not copied to Nodes", i, entry, domain)
		}
		if strings.HasPrefix(prefix, keys.Prefix) {
			return AllowList{}, fmt.Errorf("nodeLabelsFromMachine[%d] %q: keys under %s are this CCM's own and are not copied from Machines", i, entry, strings.TrimSuffix(keys.Prefix, "/"))
		}
		if isPrefix {
			allow.prefixes = append(allow.prefixes, prefix)
		} else {
			allow.exact = append(allow.exact, entry)
		}
	}
	return allow, nil
}

// reservedDomain tells whether key (or a prefix of keys) is under a domain Kubernetes reserves.
func reservedDomain(key string) (string, bool) {
	domain, _, prefixed := strings.Cut(key, "/")
	if !prefixed {
		return "", false
	}
	for _, reserved := range []string{"kubernetes.io", "k8s.io"} {
		if domain == reserved || strings.HasSuffix(domain, "."+reserved) {
			return reserved, true
		}
	}
	return "", false
}

// Allows tells whether the Machine label key is copied.
func (a AllowList) Allows(key string) bool {
	if _, reserved := reservedDomain(key); reserved || strings.HasPrefix(key, keys.Prefix) {
		return false
	}
	return slices.Contains(a.exact, key) || slices.ContainsFunc(a.prefixes, func(prefix string) bool { return strings.HasPrefix(key, prefix) })
}

// PoolLabels are the labels a Node gets from its MachinePool's name. A pool name that is not a
// valid label value (IronCore allows longer names) gives no label and an error saying why.
func PoolLabels(pool string) (map[string]string, error) {
	if problems := validation.IsValidLabelValue(pool); len(problems) > 0 {
		return nil, fmt.Errorf("MachinePool name %q is not a valid label value: %s", pool, strings.Join(problems, "; "))
	}
	return map[string]string{keys.LabelMachinePool: pool}, nil
}

// FromIronCore returns the labels the Machine's Node gets from it and its pool besides base, or
// nil if it is not scheduled yet. A Machine label overrides neither a pool's label nor base.
func FromIronCore(base map[string]string, machine *computev1alpha1.Machine, pool *computev1alpha1.MachinePool, allow AllowList) map[string]string {
	labels := map[string]string{}
	for key, value := range machine.Labels {
		if allow.Allows(key) && len(validation.IsValidLabelValue(value)) == 0 {
			labels[key] = value
		}
	}
	if pool != nil {
		for key, value := range pool.Labels {
			if strings.HasPrefix(key, TopologyPrefix) && key != string(commonv1alpha1.TopologyLabelZone) && key != string(commonv1alpha1.TopologyLabelRegion) {
				labels[key] = value
			}
		}
	}
	maps.Copy(labels, base)
	return labels
}

// Owns tells whether a Node label key is the CCM's to keep equal to IronCore's. It follows from
// the key alone, so that it costs no write on a Node that has the labels, and survives a restart.
func (a AllowList) Owns(key string) bool {
	if key == keys.LabelMachinePool || a.Allows(key) {
		return true
	}
	return strings.HasPrefix(key, TopologyPrefix) && key != string(commonv1alpha1.TopologyLabelZone) && key != string(commonv1alpha1.TopologyLabelRegion)
}

// Changes are what makes a Node's labels those desired: the labels to set, and the keys the
// CCM owns that IronCore no longer has, to remove.
type Changes struct {
	Set    map[string]string
	Remove []string
}

// Diff computes the Changes from the Node's labels and the desired ones.
func (a AllowList) Diff(current, desired map[string]string) Changes {
	changes := Changes{Set: map[string]string{}}
	for key, value := range desired {
		if have, ok := current[key]; !ok || have != value {
			changes.Set[key] = value
		}
	}
	for key := range current {
		if _, wanted := desired[key]; !wanted && a.Owns(key) {
			changes.Remove = append(changes.Remove, key)
		}
	}
	slices.Sort(changes.Remove)
	return changes
}

// None tells whether the Changes change nothing.
func (c Changes) None() bool { return len(c.Set) == 0 && len(c.Remove) == 0 }
