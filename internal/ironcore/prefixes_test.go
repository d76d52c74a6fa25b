package ironcore

import (
	"testing"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	ipamv1alpha1 "github.com/ironcore-dev/ironcore/api/ipam/v1alpha1"
	corev1 "k8s.io/api/core/v1"
)

func allocatedPrefix(cidr string, used ...string) *ipamv1alpha1.Prefix {
	prefix := &ipamv1alpha1.Prefix{}
	prefix.Spec.Prefix = commonv1alpha1.MustParseNewIPPrefix(cidr)
	prefix.Status.Phase = ipamv1alpha1.PrefixPhaseAllocated
	for _, u := range used {
		prefix.Status.Used = append(prefix.Status.Used, commonv1alpha1.MustParseIPPrefix(u))
	}
	return prefix
}

func TestHasRoomFor(t *testing.T) {
	for _, tc := range []struct {
		name   string
		prefix *ipamv1alpha1.Prefix
		length int
		want   bool
	}{
		{"empty", allocatedPrefix("10.0.0.0/24"), 26, true},
		{"full", allocatedPrefix("10.0.0.0/25", "10.0.0.0/26", "10.0.0.64/26"), 26, false},
		// Two free /27s, not adjacent: no /26 fits.
		{"fragmented", allocatedPrefix("10.0.0.0/25", "10.0.0.32/27", "10.0.0.64/27"), 26, false},
		{"fragmented, smaller fits", allocatedPrefix("10.0.0.0/25", "10.0.0.32/27", "10.0.0.64/27"), 27, true},
		{"no larger than the parent", allocatedPrefix("10.0.0.0/24"), 23, false},
		{"IPv6", allocatedPrefix("fd00::/56", "fd00::/64"), 64, true},
		{"not allocated", &ipamv1alpha1.Prefix{Spec: ipamv1alpha1.PrefixSpec{Prefix: commonv1alpha1.MustParseNewIPPrefix("10.0.0.0/24")}}, 26, false},
	} {
		if got := HasRoomFor(tc.prefix, tc.length); got != tc.want {
			t.Errorf("%s: HasRoomFor(/%d) = %v, want %v", tc.name, tc.length, got, tc.want)
		}
	}
}

func TestPrefixFamily(t *testing.T) {
	if got := PrefixFamily(allocatedPrefix("fd00::/56")); got != corev1.IPv6Protocol {
		t.Errorf("IPv6 range: %s", got)
	}
	if got := PrefixFamily(&ipamv1alpha1.Prefix{Spec: ipamv1alpha1.PrefixSpec{IPFamily: corev1.IPv4Protocol}}); got != corev1.IPv4Protocol {
		t.Errorf("spec family: %s", got)
	}
	if got := PrefixFamily(&ipamv1alpha1.Prefix{}); got != "" {
		t.Errorf("unknown: %s", got)
	}
}
