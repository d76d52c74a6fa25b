package lbtargets

import (
	"testing"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
)

func TestSetTargetLabel(t *testing.T) {
	nic := func(labels map[string]string) *networkingv1alpha1.NetworkInterface {
		return &networkingv1alpha1.NetworkInterface{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels}}
	}
	for _, tc := range []struct {
		name        string
		labels      map[string]string
		target      bool
		wantChanged bool
		wantErr     bool
		want        map[string]string
	}{
		{"a new target gets both labels", nil, true, true, false, map[string]string{keys.LabelCluster: "c", keys.LabelLoadBalancerTarget: "c"}},
		{"a target stays", map[string]string{keys.LabelCluster: "c", keys.LabelLoadBalancerTarget: "c"}, true, false, false, nil},
		{"another cluster's is refused", map[string]string{keys.LabelCluster: "other"}, true, false, true, nil},
		{"a target is unlabelled, the cluster label kept", map[string]string{keys.LabelCluster: "c", keys.LabelLoadBalancerTarget: "c"}, false, true, false, map[string]string{keys.LabelCluster: "c"}},
		{"no target, nothing to remove", map[string]string{keys.LabelCluster: "c"}, false, false, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := nic(tc.labels)
			changed, err := setTargetLabel(n, "c", tc.target)
			if (err != nil) != tc.wantErr || changed != tc.wantChanged {
				t.Fatalf("setTargetLabel = %v, %v; want changed %v, error %v", changed, err, tc.wantChanged, tc.wantErr)
			}
			if tc.want != nil && !equalLabels(n.Labels, tc.want) {
				t.Fatalf("labels %v, want %v", n.Labels, tc.want)
			}
		})
	}
}

func equalLabels(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestTargetInputs: a label sync follows the target and cluster labels, the state, the
// addresses and the attachment of a NetworkInterface, and nothing else (its prefixes, say).
func TestTargetInputs(t *testing.T) {
	base := &networkingv1alpha1.NetworkInterface{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{keys.LabelCluster: "c"}}}
	changes := map[string]func(*networkingv1alpha1.NetworkInterface){
		"target label": func(n *networkingv1alpha1.NetworkInterface) { n.Labels[keys.LabelLoadBalancerTarget] = "c" },
		"state": func(n *networkingv1alpha1.NetworkInterface) {
			n.Status.State = networkingv1alpha1.NetworkInterfaceStateAvailable
		},
		"addresses": func(n *networkingv1alpha1.NetworkInterface) {
			n.Status.IPs = []commonv1alpha1.IP{commonv1alpha1.MustParseIP("10.0.0.1")}
		},
		"attachment": func(n *networkingv1alpha1.NetworkInterface) {
			n.Spec.MachineRef = &commonv1alpha1.LocalUIDReference{Name: "m"}
		},
	}
	for name, change := range changes {
		changed := base.DeepCopy()
		change(changed)
		if !targetInputsChanged(base, changed) {
			t.Errorf("a change of the %s does not queue a label sync", name)
		}
	}
	prefixes := base.DeepCopy()
	prefixes.Spec.Prefixes = []networkingv1alpha1.PrefixSource{{Value: commonv1alpha1.MustParseNewIPPrefix("10.1.0.0/24")}}
	if targetInputsChanged(base, prefixes) {
		t.Error("a change of the prefixes queues a label sync")
	}
}
