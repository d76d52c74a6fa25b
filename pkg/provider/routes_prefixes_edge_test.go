package provider

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	ipamv1alpha1 "github.com/ironcore-dev/ironcore/api/ipam/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
)

// TestRemovePrefixKeepsEphemeralEntriesInPlace checks that deleting a route never moves an
// ephemeral entry of spec.prefixes: IronCore names its Prefix after the entry's index.
func TestRemovePrefixKeepsEphemeralEntriesInPlace(t *testing.T) {
	literal := func(cidr string) networkingv1alpha1.PrefixSource {
		return networkingv1alpha1.PrefixSource{Value: &commonv1alpha1.IPPrefix{Prefix: netip.MustParsePrefix(cidr)}}
	}
	ephemeral := func(length int32) networkingv1alpha1.PrefixSource {
		return networkingv1alpha1.PrefixSource{Ephemeral: &networkingv1alpha1.EphemeralPrefixSource{PrefixTemplate: &ipamv1alpha1.PrefixTemplateSpec{
			Spec: ipamv1alpha1.PrefixSpec{PrefixLength: length},
		}}}
	}
	const route, other = "10.244.1.0/24", "10.244.2.0/24"
	for _, tc := range []struct {
		name        string
		prefixes    []networkingv1alpha1.PrefixSource
		annotation  string
		want        []networkingv1alpha1.PrefixSource
		wantRemoved bool
		wantErr     string
	}{{
		name:        "after the ephemeral entries",
		prefixes:    []networkingv1alpha1.PrefixSource{ephemeral(30), literal(route), literal("192.0.2.0/24")},
		annotation:  route,
		want:        []networkingv1alpha1.PrefixSource{ephemeral(30), literal("192.0.2.0/24")},
		wantRemoved: true,
	}, {
		name:        "before an ephemeral entry, a literal one after it takes its place",
		prefixes:    []networkingv1alpha1.PrefixSource{literal(route), ephemeral(30), literal("192.0.2.0/24"), literal(other)},
		annotation:  route + "," + other,
		want:        []networkingv1alpha1.PrefixSource{literal(other), ephemeral(30), literal("192.0.2.0/24")},
		wantRemoved: true,
	}, {
		name: "duplicates before and after ephemeral entries",
		prefixes: []networkingv1alpha1.PrefixSource{
			literal(route), ephemeral(30), literal(route), ephemeral(29), literal(other), literal("192.0.2.0/24"), literal(route),
		},
		annotation:  route,
		want:        []networkingv1alpha1.PrefixSource{literal("192.0.2.0/24"), ephemeral(30), literal(other), ephemeral(29)},
		wantRemoved: true,
	}, {
		name:       "two entries before ephemeral ones, one literal entry to move",
		prefixes:   []networkingv1alpha1.PrefixSource{literal(route), ephemeral(30), literal(route), ephemeral(29), literal(other), literal(route)},
		annotation: route,
		wantErr:    "entry 2 of spec.prefixes, before the ephemeral entry 3",
	}, {
		name:       "before the last ephemeral entry, with nothing after it to move",
		prefixes:   []networkingv1alpha1.PrefixSource{ephemeral(30), literal(route), ephemeral(29)},
		annotation: route,
		wantErr:    "entry 1 of spec.prefixes, before the ephemeral entry 2",
	}, {
		name:       "not a managed prefix",
		prefixes:   []networkingv1alpha1.PrefixSource{literal(route), ephemeral(30)},
		annotation: other,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			nic := &networkingv1alpha1.NetworkInterface{
				ObjectMeta: metav1.ObjectMeta{Name: "nic", Annotations: map[string]string{keys.AnnotationRoutes: tc.annotation}},
				Spec:       networkingv1alpha1.NetworkInterfaceSpec{Prefixes: tc.prefixes},
			}
			original := nic.DeepCopy()
			removed, err := removePrefix(nic, netip.MustParsePrefix(route))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("removePrefix = %v, %v; want an error saying %q", removed, err, tc.wantErr)
				}
				if removed || !reflect.DeepEqual(nic, original) {
					t.Fatalf("removePrefix failed but changed the NetworkInterface: %v", nic.Spec.Prefixes)
				}
				return
			}
			if err != nil || removed != tc.wantRemoved {
				t.Fatalf("removePrefix = %v, %v; want %v, nil", removed, err, tc.wantRemoved)
			}
			for i, source := range original.Spec.Prefixes {
				if source.Value == nil && (i >= len(nic.Spec.Prefixes) || !reflect.DeepEqual(nic.Spec.Prefixes[i], source)) {
					t.Errorf("the ephemeral entry %d moved: %v", i, nic.Spec.Prefixes)
				}
			}
			if !tc.wantRemoved {
				if !reflect.DeepEqual(nic, original) {
					t.Errorf("nothing to remove, but the NetworkInterface changed: %v", nic.Spec.Prefixes)
				}
				return
			}
			if !reflect.DeepEqual(nic.Spec.Prefixes, tc.want) {
				t.Errorf("prefixes %v, want %v", nic.Spec.Prefixes, tc.want)
			}
			for _, cidr := range annotatedRoutes(nic) {
				if cidr.String() == route {
					t.Errorf("routes annotation %q still has the route", nic.Annotations[keys.AnnotationRoutes])
				}
			}
		})
	}
}
