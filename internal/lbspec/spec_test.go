package lbspec

import (
	"errors"
	"slices"
	"strings"
	"testing"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
)

func testService(mutate func(*corev1.Service)) *corev1.Service {
	service := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"},
		Spec: corev1.ServiceSpec{
			Type:       corev1.ServiceTypeLoadBalancer,
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports:      []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
		},
	}
	if mutate != nil {
		mutate(service)
	}
	return service
}

func testSettings() Settings {
	return Settings{
		Cluster: "lab", Network: "net",
		InternalPrefixes: map[corev1.IPFamily]string{corev1.IPv4Protocol: "v4"},
		UseNICSelector:   true,
	}
}

func TestNames(t *testing.T) {
	if got := Name(testService(nil)); got != "0b1c2d3e4f5061728394a5b6c7d8e9f0" {
		t.Errorf("name %q", got)
	}
	if got := LegacyName("lab", testService(nil)); got != "lab-web-0b1c2d3e" {
		t.Errorf("legacy name %q", got)
	}
}

func TestDesiredRejects(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*corev1.Service)
		reason string
		text   string
	}{
		{"port zero", func(s *corev1.Service) { s.Spec.Ports[0].Port = 0 }, ReasonUnsupportedPort, "spec.ports[0] "},
		{"port too high", func(s *corev1.Service) { s.Spec.Ports[0].Port = 70000 }, ReasonUnsupportedPort, "70000 is not a port number"},
		{"two addresses of a family", func(s *corev1.Service) {
			s.Annotations = map[string]string{keys.AnnotationInternalLoadBalancer: "true", keys.AnnotationLoadBalancerIPs: "10.0.0.1,10.0.0.2"}
		}, ReasonInvalidLoadBalancerIP, "give at most one per family"},
		{"IPv6 internal without a prefix", func(s *corev1.Service) {
			s.Annotations = map[string]string{keys.AnnotationInternalLoadBalancer: "true"}
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
		}, ReasonInternalPrefixMissing, "ipv6PrefixName"},
		{"zoned address", func(s *corev1.Service) {
			s.Annotations = map[string]string{keys.AnnotationInternalLoadBalancer: "true", keys.AnnotationLoadBalancerIPs: "fe80::1%eth0"}
		}, ReasonInvalidLoadBalancerIP, "is not an IP address"},
		{"internal annotation 1", func(s *corev1.Service) { s.Annotations = map[string]string{keys.AnnotationInternalLoadBalancer: "1"} }, ReasonInvalidAnnotation, `not "1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lb, err := Desired(testService(tc.mutate), testSettings())
			var problem *Problem
			if !errors.As(err, &problem) || problem.Reason != tc.reason || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("Desired = %v, %v; want a %s problem containing %q", lb, err, tc.reason, tc.text)
			}
		})
	}
}

// TestDesiredInternalMixesRequestedAndAllocated: a requested Internal address is asked of
// IronCore's IPAM as an exact child of the family's Prefix, beside one IPAM chooses; without a
// Prefix for its family it is refused, never set as a literal.
func TestDesiredInternalMixesRequestedAndAllocated(t *testing.T) {
	service := testService(func(s *corev1.Service) {
		s.Annotations = map[string]string{keys.AnnotationInternalLoadBalancer: "true", keys.AnnotationLoadBalancerIPs: " fd00::7 "}
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	})
	settings := testSettings()
	settings.InternalPrefixes[corev1.IPv6Protocol] = "v6"
	lb, err := Desired(service, settings)
	if err != nil {
		t.Fatal(err)
	}
	ips := lb.Spec.IPs
	if len(ips) != 2 || ips[0].Ephemeral == nil || ips[0].Ephemeral.PrefixTemplate.Spec.ParentRef.Name != "v4" ||
		ips[0].Ephemeral.PrefixTemplate.Spec.PrefixLength != 32 || ips[0].Ephemeral.PrefixTemplate.Spec.Prefix != nil {
		t.Fatalf("IPs %+v, want IPv4 allocated from v4", ips)
	}
	if v6 := ips[1]; v6.Value != nil || v6.Ephemeral == nil || v6.Ephemeral.PrefixTemplate.Spec.ParentRef.Name != "v6" ||
		v6.Ephemeral.PrefixTemplate.Spec.Prefix == nil || v6.Ephemeral.PrefixTemplate.Spec.Prefix.String() != "fd00::7/128" ||
		v6.Ephemeral.PrefixTemplate.Spec.PrefixLength != 128 {
		t.Fatalf("IPv6 source %+v, want fd00::7/128 allocated from v6", v6)
	}
	if got := RequestedAddresses(lb); len(got) != 1 || got["v6"].String() != "fd00::7" {
		t.Fatalf("RequestedAddresses = %v, want fd00::7 from v6", got)
	}

	delete(settings.InternalPrefixes, corev1.IPv6Protocol)
	_, err = Desired(service, settings)
	var problem *Problem
	if !errors.As(err, &problem) || problem.Reason != ReasonInternalPrefixMissing || !strings.Contains(err.Error(), "fd00::7") {
		t.Fatalf("Desired without an IPv6 Prefix: %v, want a %s naming the address", err, ReasonInternalPrefixMissing)
	}
}

func TestNeedsApplyIgnoresOtherLabels(t *testing.T) {
	desired, err := Desired(testService(nil), testSettings())
	if err != nil {
		t.Fatal(err)
	}
	existing := desired.DeepCopy()
	existing.Labels["someone-else/label"] = "x"
	existing.Annotations["someone-else/annotation"] = "y"
	if NeedsApply(existing, desired) {
		t.Fatal("foreign labels and annotations made a write necessary")
	}
	existing.Spec.Ports[0].Port = 8080
	if !NeedsApply(existing, desired) {
		t.Fatal("a changed port did not make a write necessary")
	}
}

func TestPublicLoadBalancerIPIsIgnoredWithAnEvent(t *testing.T) {
	service := testService(func(s *corev1.Service) { s.Spec.LoadBalancerIP = "203.0.113.10" })
	if _, err := Desired(service, testSettings()); err != nil {
		t.Fatalf("a Public Service with spec.loadBalancerIP is refused: %v", err)
	}
	notes := IgnoredFields(service, nil)
	if len(notes) != 1 || notes[0].Reason != ReasonLoadBalancerIPIgnored {
		t.Fatalf("notes %v, want one %s", notes, ReasonLoadBalancerIPIgnored)
	}
	// A LoadBalancer that holds the address (one taken over with it) ignores nothing.
	existing := &networkingv1alpha1.LoadBalancer{Status: networkingv1alpha1.LoadBalancerStatus{IPs: []commonv1alpha1.IP{commonv1alpha1.MustParseIP("203.0.113.10")}}}
	if notes := IgnoredFields(service, existing); len(notes) != 0 {
		t.Fatalf("notes %v for a LoadBalancer holding the address, want none", notes)
	}
	existing.Status.IPs = []commonv1alpha1.IP{commonv1alpha1.MustParseIP("203.0.113.99")}
	if notes := IgnoredFields(service, existing); len(notes) != 1 || !strings.Contains(notes[0].Message, "203.0.113.10") {
		t.Fatalf("notes %v for a LoadBalancer with another address, want one naming 203.0.113.10", notes)
	}
}

// TestANamedLoadBalancerIsNotTakenOverByAServiceThatHasOne: the annotation naming a
// LoadBalancer to take over, on a Service that has another, is noted and changes nothing.
func TestANamedLoadBalancerIsNotTakenOverByAServiceThatHasOne(t *testing.T) {
	service := testService(func(s *corev1.Service) { s.Annotations = map[string]string{keys.AnnotationLoadBalancerName: "kept"} })
	existing := &networkingv1alpha1.LoadBalancer{}
	existing.Name = Name(service)
	if notes := IgnoredFields(service, existing); len(notes) != 1 || notes[0].Reason != ReasonNotAdopted || !strings.Contains(notes[0].Message, "kept") {
		t.Fatalf("notes %v, want one %s naming kept", notes, ReasonNotAdopted)
	}
	existing.Name = "kept"
	if notes := IgnoredFields(service, existing); len(notes) != 0 {
		t.Fatalf("notes %v for the Service that has the named LoadBalancer, want none", notes)
	}
}

// TestWantedAdoption: what a Service asks to take over, addresses in family order, and
// whether it gets no other LoadBalancer without it (a name, or a Public Service's annotation).
func TestWantedAdoption(t *testing.T) {
	dual := func(s *corev1.Service) {
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	}
	for _, tc := range []struct {
		name   string
		modify func(*corev1.Service)
		wanted bool
		want   []string
		strict bool
	}{
		{name: "none", modify: func(*corev1.Service) {}},
		{name: "spec on Public", modify: func(s *corev1.Service) { s.Spec.LoadBalancerIP = "203.0.113.10" }, wanted: true, want: []string{"203.0.113.10"}},
		{name: "annotation on Public", modify: func(s *corev1.Service) {
			s.Annotations = map[string]string{keys.AnnotationLoadBalancerIPs: "2001:db8::1, 203.0.113.10"}
			dual(s)
		}, wanted: true, want: []string{"203.0.113.10", "2001:db8::1"}, strict: true},
		{name: "annotation on Internal", modify: func(s *corev1.Service) {
			s.Annotations = map[string]string{keys.AnnotationInternalLoadBalancer: "true", keys.AnnotationLoadBalancerIPs: "10.0.0.7"}
		}, wanted: true, want: []string{"10.0.0.7"}},
		{name: "named", modify: func(s *corev1.Service) {
			s.Annotations = map[string]string{keys.AnnotationLoadBalancerName: "kept", keys.AnnotationLoadBalancerIPs: "203.0.113.10"}
		}, wanted: true, strict: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			service := testService(tc.modify)
			desired, err := Desired(service, testSettings())
			if err != nil {
				t.Fatal(err)
			}
			adoption, wanted := WantedAdoption(service, desired)
			var got []string
			for _, addr := range adoption.Addresses {
				got = append(got, addr.String())
			}
			if wanted != tc.wanted || !slices.Equal(got, tc.want) || adoption.Strict != tc.strict {
				t.Errorf("wanted %v, addresses %v, strict %v; want %v, %v, %v", wanted, got, adoption.Strict, tc.wanted, tc.want, tc.strict)
			}
		})
	}
}

func TestAnExistingInternalLoadBalancerKeepsItsAddressSources(t *testing.T) {
	existing, err := Desired(testService(func(s *corev1.Service) {
		s.Annotations = map[string]string{keys.AnnotationInternalLoadBalancer: "true"}
	}), testSettings())
	if err != nil {
		t.Fatal(err)
	}
	service := testService(func(s *corev1.Service) {
		s.Annotations = map[string]string{keys.AnnotationInternalLoadBalancer: "true"}
		s.Spec.LoadBalancerIP = "10.0.0.9"
	})
	desired, err := Desired(service, testSettings())
	if err != nil {
		t.Fatal(err)
	}
	notes := KeepAddresses(service, existing, desired)
	if desired.Spec.IPs[0].Value != nil || desired.Spec.IPs[0].Ephemeral == nil {
		t.Fatalf("the requested address replaced the existing allocation: %+v", desired.Spec.IPs)
	}
	if len(notes) != 1 || notes[0].Reason != ReasonLoadBalancerIPKept {
		t.Fatalf("notes %v, want one %s", notes, ReasonLoadBalancerIPKept)
	}
}
