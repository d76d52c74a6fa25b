package lbspec

import (
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/clusterid"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
)

// FuzzDesired feeds the Service-to-LoadBalancer translation arbitrary annotations, addresses,
// ports and families: it must not panic, and each rejection must be a Problem with one of the
// rejection reasons (package docgen's tests check that docgen.EventReasons documents them)
// whose message names the field it is about. What an accepted Service asks to take over, its
// own Prefixes and the notes about it must follow from the same annotations without a panic.
func FuzzDesired(f *testing.F) {
	f.Add("", "", "", int32(80), "TCP", uint8(1), true, false, "", "")
	f.Add("true", "10.1.0.5", "", int32(443), "UDP", uint8(3), false, false, "team-a", "")
	f.Add("true", "10.1.0.5,fd00::1", "10.1.0.6", int32(53), "SCTP", uint8(4), true, true, "", "kept")
	f.Add("True", "", "", int32(0), "ICMP", uint8(2), true, false, "Team_A", "")
	f.Add("false", "203.0.113.1", "", int32(70000), "", uint8(0), false, true, "team-a", "kept")
	f.Add("true", "fe80::1%eth0", " 10.0.0.1 ", int32(-1), "tcp", uint8(2), true, false, "", "")
	familyLists := [][]corev1.IPFamily{
		nil, {corev1.IPv4Protocol}, {corev1.IPv6Protocol},
		{corev1.IPv4Protocol, corev1.IPv6Protocol}, {corev1.IPv6Protocol, corev1.IPv4Protocol},
	}
	rejections := []string{ReasonInvalidAnnotation, ReasonInvalidLoadBalancerIP, ReasonUnsupportedPort, ReasonInternalPrefixMissing}
	f.Fuzz(func(t *testing.T, internal, ips, loadBalancerIP string, port int32, protocol string, families uint8, selector, local bool, prefix, name string) {
		service := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "svc", UID: types.UID("0b9c7a8e-1f2d-4c3b-9a8e-7d6c5b4a3f21"),
				Annotations: map[string]string{}},
			Spec: corev1.ServiceSpec{
				Type:           corev1.ServiceTypeLoadBalancer,
				IPFamilies:     familyLists[int(families)%len(familyLists)],
				LoadBalancerIP: loadBalancerIP,
				Ports:          []corev1.ServicePort{{Name: "p", Port: port, Protocol: corev1.Protocol(protocol)}},
			},
		}
		if internal != "" {
			service.Annotations[keys.AnnotationInternalLoadBalancer] = internal
		}
		if ips != "" {
			service.Annotations[keys.AnnotationLoadBalancerIPs] = ips
		}
		if prefix != "" {
			service.Annotations[keys.AnnotationLoadBalancerPrefix] = prefix
		}
		if name != "" {
			service.Annotations[keys.AnnotationLoadBalancerName] = name
		}
		if local {
			service.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}
		settings := Settings{Cluster: "c", ClusterID: clusterid.New(), Network: "n",
			InternalPrefixes: map[corev1.IPFamily]string{corev1.IPv4Protocol: "p4"}, UseNICSelector: selector}
		lb, err := Desired(service, settings)
		if err == nil {
			if lb == nil || len(lb.Spec.Ports) != 1 || lb.Name == "" {
				t.Fatalf("accepted, but the LoadBalancer is %+v", lb)
			}
			adoption, wanted := WantedAdoption(service, lb)
			if wanted && adoption.Name == "" && len(adoption.Addresses) == 0 {
				t.Fatalf("asks to take over %+v: neither a name nor addresses", adoption)
			}
			for family, own := range ServicePrefixes(service, lb) {
				if own != prefix || family != corev1.IPv4Protocol || lb.Spec.Type != "Internal" {
					t.Fatalf("own Prefix %s (%s) of a %s LoadBalancer, but the annotation says %q", own, family, lb.Spec.Type, prefix)
				}
			}
			_ = IgnoredFields(service, lb)
			return
		}
		var rejection *Problem
		if !errors.As(err, &rejection) || !slices.Contains(rejections, rejection.Reason) {
			t.Fatalf("rejection %v is not a Problem with a rejection reason", err)
		}
		fields := []string{keys.AnnotationInternalLoadBalancer, keys.AnnotationLoadBalancerIPs, keys.AnnotationLoadBalancerPrefix, "spec.loadBalancerIP", "spec.ports[", "prefixName"}
		if !slices.ContainsFunc(fields, func(field string) bool { return strings.Contains(rejection.Message, field) }) {
			t.Fatalf("rejection %q names none of the fields %v", rejection.Message, fields)
		}
	})
}
