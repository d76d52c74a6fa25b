package podcidrs

import (
	"strings"
	"testing"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/config"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
)

func literal(cidr string) networkingv1alpha1.PrefixSource {
	return networkingv1alpha1.PrefixSource{Value: commonv1alpha1.MustParseNewIPPrefix(cidr)}
}

func TestPodCIDREntriesAreTheClustersOnly(t *testing.T) {
	v4 := podCIDRSource("lab", config.PodCIDRFamily{Family: corev1.IPv4Protocol, ParentPrefix: "pods", MaskSize: 24})
	v6 := podCIDRSource("lab", config.PodCIDRFamily{Family: corev1.IPv6Protocol, ParentLabels: map[string]string{"a": "b"}, MaskSize: 64})
	otherCluster := podCIDRSource("other", config.PodCIDRFamily{Family: corev1.IPv4Protocol, ParentPrefix: "pods", MaskSize: 24})
	unlabelled := podCIDRSource("lab", config.PodCIDRFamily{Family: corev1.IPv4Protocol, ParentPrefix: "pods", MaskSize: 24})
	delete(unlabelled.Ephemeral.PrefixTemplate.Labels, keys.LabelPodCIDR)
	nic := &networkingv1alpha1.NetworkInterface{Spec: networkingv1alpha1.NetworkInterfaceSpec{Prefixes: []networkingv1alpha1.PrefixSource{
		literal("10.244.0.0/24"), otherCluster, v4, unlabelled, v6,
	}}}
	entries := ironcore.PodCIDREntries(nic, "lab")
	want := []ironcore.PodCIDREntry{{Index: 2, Family: corev1.IPv4Protocol}, {Index: 4, Family: corev1.IPv6Protocol}}
	if len(entries) != len(want) || entries[0] != want[0] || entries[1] != want[1] {
		t.Fatalf("entries = %+v, want %+v", entries, want)
	}

	template := v4.Ephemeral.PrefixTemplate
	if template.Spec.ParentRef == nil || template.Spec.ParentRef.Name != "pods" || template.Spec.PrefixLength != 24 || template.Spec.IPFamily != corev1.IPv4Protocol {
		t.Errorf("IPv4 template spec = %+v", template.Spec)
	}
	// Without this annotation IronCore never deletes the Prefix of a removed entry.
	if template.Annotations[ephemeralManagedByKey] != ephemeralManagedByValue {
		t.Errorf("template annotations = %v", template.Annotations)
	}
	if selector := v6.Ephemeral.PrefixTemplate.Spec.ParentSelector; selector == nil || selector.MatchLabels["a"] != "b" || v6.Ephemeral.PrefixTemplate.Spec.ParentRef != nil {
		t.Errorf("IPv6 template selects %+v", v6.Ephemeral.PrefixTemplate.Spec)
	}
}

func TestWithoutEntriesNeverMovesAnEphemeralEntry(t *testing.T) {
	v4 := podCIDRSource("lab", config.PodCIDRFamily{Family: corev1.IPv4Protocol, ParentPrefix: "pods", MaskSize: 24})
	v6 := podCIDRSource("lab", config.PodCIDRFamily{Family: corev1.IPv6Protocol, ParentPrefix: "pods6", MaskSize: 64})
	sources := []networkingv1alpha1.PrefixSource{literal("10.244.0.0/24"), v4, v6, literal("10.244.1.0/24")}

	kept, err := withoutEntries(sources, map[int]bool{1: true, 2: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(kept) != 2 || kept[0].Value.String() != "10.244.0.0/24" || kept[1].Value.String() != "10.244.1.0/24" {
		t.Errorf("kept = %+v, want the two literal entries", kept)
	}
	// Removing the IPv4 entry alone would move the IPv6 one to index 1.
	if _, err := withoutEntries(sources, map[int]bool{1: true}); err == nil || !strings.Contains(err.Error(), "entry 2 of spec.prefixes") {
		t.Errorf("removing an entry before another ephemeral one: error %v", err)
	}
	// The last one can go alone; literal entries after it may move.
	kept, err = withoutEntries(sources, map[int]bool{2: true})
	if err != nil || len(kept) != 3 || kept[1].Ephemeral == nil {
		t.Errorf("removing the last ephemeral entry: %+v, %v", kept, err)
	}
}
