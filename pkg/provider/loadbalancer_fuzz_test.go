package provider

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

// fuzzFamilies are the IP family lists a fuzzed Service may have.
var fuzzFamilies = [][]corev1.IPFamily{
	nil, {corev1.IPv4Protocol}, {corev1.IPv6Protocol},
	{corev1.IPv4Protocol, corev1.IPv6Protocol}, {corev1.IPv6Protocol, corev1.IPv4Protocol},
}

// FuzzDesiredLoadBalancer feeds the Service-to-LoadBalancer translation arbitrary annotations,
// addresses, ports and families: it must not panic, and each rejection must be a serviceError
// with a documented reason whose message names the field it is about.
func FuzzDesiredLoadBalancer(f *testing.F) {
	f.Add("", "", "", int32(80), "TCP", uint8(1), true, false)
	f.Add("true", "10.1.0.5", "", int32(443), "UDP", uint8(3), false, false)
	f.Add("true", "10.1.0.5,fd00::1", "10.1.0.6", int32(53), "SCTP", uint8(4), true, true)
	f.Add("True", "", "", int32(0), "ICMP", uint8(2), true, false)
	f.Add("false", "203.0.113.1", "", int32(70000), "", uint8(0), false, true)
	f.Add("true", "fe80::1%eth0", " 10.0.0.1 ", int32(-1), "tcp", uint8(2), true, false)
	documented := map[string]bool{}
	for _, reason := range EventReasons() {
		documented[reason.Reason] = true
	}
	f.Fuzz(func(t *testing.T, internal, ips, loadBalancerIP string, port int32, protocol string, families uint8, selector, local bool) {
		service := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "svc", UID: types.UID("0b9c7a8e-1f2d-4c3b-9a8e-7d6c5b4a3f21"),
				Annotations: map[string]string{}},
			Spec: corev1.ServiceSpec{
				Type:           corev1.ServiceTypeLoadBalancer,
				IPFamilies:     fuzzFamilies[int(families)%len(fuzzFamilies)],
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
		if local {
			service.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}
		settings := loadBalancerSettings{cluster: "c", clusterID: clusterid.New(), network: "n",
			internalPrefixes: map[corev1.IPFamily]string{corev1.IPv4Protocol: "p4"}, useNICSelector: selector}
		lb, err := desiredLoadBalancer(service, settings)
		if err == nil {
			if lb == nil || len(lb.Spec.Ports) != 1 || lb.Name == "" {
				t.Fatalf("accepted, but the LoadBalancer is %+v", lb)
			}
			return
		}
		var rejection *serviceError
		if !errors.As(err, &rejection) || !documented[rejection.reason] {
			t.Fatalf("rejection %v is not a serviceError with a documented reason", err)
		}
		fields := []string{keys.AnnotationInternalLoadBalancer, keys.AnnotationLoadBalancerIPs, "spec.loadBalancerIP", "spec.ports[", "prefixName"}
		if !slices.ContainsFunc(fields, func(field string) bool { return strings.Contains(rejection.message, field) }) {
			t.Fatalf("rejection %q names none of the fields %v", rejection.message, fields)
		}
	})
}
