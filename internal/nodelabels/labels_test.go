package nodelabels

import (
	"reflect"
	"strings"
	"testing"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
)

func TestParseAllowListRefusesReservedAndInvalidKeys(t *testing.T) {
	for _, tc := range []struct {
		entry, want string
	}{
		{"node-role.kubernetes.io/worker", "reserved for Kubernetes"},
		{"kubernetes.io/hostname", "reserved for Kubernetes"},
		{"node.kubernetes.io/*", "reserved for Kubernetes"},
		{"k8s.io/x", "reserved for Kubernetes"},
		{"sub.k8s.io/*", "reserved for Kubernetes"},
		{"*", "is not a label key"},
		{"has space", "is not a label key"},
		{"a/b/c", "is not a label key"},
		{"cloud-provider.ironcore.dev/machine-pool", "this CCM's own"},
		{"cloud-provider.ironcore.dev/*", "this CCM's own"},
	} {
		_, err := ParseAllowList([]string{"team", tc.entry})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "nodeLabelsFromMachine[1]") || !strings.Contains(err.Error(), tc.entry) {
			t.Errorf("%q: error %v, want one naming the entry and saying %q", tc.entry, err, tc.want)
		}
	}
	if _, err := ParseAllowList([]string{"team", "example.com/*", "cost-*", "kubernetes.io.example.com/x"}); err != nil {
		t.Errorf("valid entries refused: %v", err)
	}
}

func TestAllows(t *testing.T) {
	allow, err := ParseAllowList([]string{"team", "example.com/*", "cost-*", "cloud-*"})
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]bool{
		"cloud-team": true, keys.LabelMachinePool: false,
		"team": true, "teams": false, "example.com/owner": true, "example.com": false,
		"cost-center": true, "cost": false, "other": false,
		// A prefix never lets a reserved key through.
		"cost-x.kubernetes.io/y": false,
	} {
		if got := allow.Allows(key); got != want {
			t.Errorf("Allows(%q) = %v, want %v", key, got, want)
		}
	}
}

func TestPoolLabels(t *testing.T) {
	for _, tc := range []struct {
		pool    string
		wantErr bool
	}{
		{pool: "pool-a"},
		{pool: "pools.zone-a.example.org"},
		{pool: strings.Repeat("p", 63)},
		{pool: strings.Repeat("p", 64), wantErr: true},
		{pool: "machinepool-" + strings.Repeat("0123456789", 10), wantErr: true},
	} {
		labels, err := PoolLabels(tc.pool)
		switch {
		case tc.wantErr && (err == nil || labels != nil):
			t.Errorf("PoolLabels(%q) = %v, %v; want no labels and an error", tc.pool, labels, err)
		case !tc.wantErr && (err != nil || len(labels) != 1 || labels[keys.LabelMachinePool] != tc.pool):
			t.Errorf("PoolLabels(%q) = %v, %v; want the pool label", tc.pool, labels, err)
		}
	}
}

func TestFromIronCore(t *testing.T) {
	allow, err := ParseAllowList([]string{"team", "example.com/*"})
	if err != nil {
		t.Fatal(err)
	}
	machine := &computev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{
		"team": "payments", "example.com/owner": "ann", "secret": "x", "example.com/bad": "not a value!",
		TopologyPrefix + "rack": "from-the-machine",
	}}}
	pool := &computev1alpha1.MachinePool{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{
		TopologyPrefix + "zone": "z", TopologyPrefix + "region": "r", TopologyPrefix + "rack": "r12", TopologyPrefix + "site": "fra1", "other": "x",
	}}}
	got := FromIronCore(map[string]string{keys.LabelMachinePool: "pool-a"}, machine, pool, allow)
	want := map[string]string{
		keys.LabelMachinePool: "pool-a", "team": "payments", "example.com/owner": "ann",
		TopologyPrefix + "rack": "r12", TopologyPrefix + "site": "fra1",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("labels %v, want %v", got, want)
	}
}

func TestDiff(t *testing.T) {
	allow, err := ParseAllowList([]string{"team", "example.com/*"})
	if err != nil {
		t.Fatal(err)
	}
	current := map[string]string{
		"team": "old", "user-set": "mine", "example.com/gone": "x", "kept": "same",
		TopologyPrefix + "rack": "r1", TopologyPrefix + "zone": "by-hand", keys.LabelMachinePool: "pool-a",
	}
	desired := map[string]string{"team": "new", "kept": "same", "example.com/added": "y", keys.LabelMachinePool: "pool-a"}
	changes := allow.Diff(current, desired)
	if want := map[string]string{"team": "new", "example.com/added": "y"}; !reflect.DeepEqual(changes.Set, want) {
		t.Errorf("set %v, want %v", changes.Set, want)
	}
	// Never user-set or the zone, which are not the CCM's.
	if want := []string{"example.com/gone", TopologyPrefix + "rack"}; !reflect.DeepEqual(changes.Remove, want) {
		t.Errorf("remove %v, want %v", changes.Remove, want)
	}
	if !allow.Diff(desired, desired).None() {
		t.Error("a Node as desired has changes")
	}
}
