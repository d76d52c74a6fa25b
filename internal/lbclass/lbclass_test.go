package lbclass

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	servicehelpers "k8s.io/cloud-provider/service/helpers"
)

func service(class string, finalizer bool, serviceType corev1.ServiceType) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s", Finalizers: []string{"example.org/other"}}, Spec: corev1.ServiceSpec{Type: serviceType}}
	if class != "" {
		s.Spec.LoadBalancerClass = &class
	}
	if finalizer {
		s.Finalizers = append(s.Finalizers, servicehelpers.LoadBalancerCleanupFinalizer)
	}
	return s
}

func TestServes(t *testing.T) {
	lb := corev1.ServiceTypeLoadBalancer
	for _, tc := range []struct {
		name               string
		service            *corev1.Service
		byDefault, onlyOwn bool
	}{
		{"class-less", service("", false, lb), true, false},
		{"class-less, served before", service("", true, lb), true, true},
		{"of the class", service(Name, false, lb), true, true},
		{"of another class", service("metallb.io/metallb", true, lb), false, false},
		{"not a load balancer", service(Name, true, corev1.ServiceTypeClusterIP), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := (Policy{}).Serves(tc.service); got != tc.byDefault {
				t.Errorf("by default: Serves = %v, want %v", got, tc.byDefault)
			}
			if got := (Policy{ClassOnly: true}).Serves(tc.service); got != tc.onlyOwn {
				t.Errorf("with ClassOnly: Serves = %v, want %v", got, tc.onlyOwn)
			}
		})
	}
	deleting := service(Name, true, lb)
	deleting.DeletionTimestamp = &metav1.Time{}
	if (Policy{}).Wants(deleting) {
		t.Error("Wants a Service being deleted")
	}
}

// TestView checks what the upstream service controller sees: it serves class-less Services
// (class nil, type LoadBalancer) and cleans up those with the finalizer that no longer want
// one; everything else it leaves alone.
func TestView(t *testing.T) {
	lb := corev1.ServiceTypeLoadBalancer
	served := func(s *corev1.Service) bool { return s.Spec.Type == lb && s.Spec.LoadBalancerClass == nil }
	cleaned := servicehelpers.HasLBFinalizer
	for _, tc := range []struct {
		name    string
		policy  Policy
		service *corev1.Service
		served  bool
		cleaned bool
	}{
		{"of the class", Policy{}, service(Name, true, lb), true, true},
		{"class-less", Policy{}, service("", true, lb), true, true},
		{"class-less, class only", Policy{ClassOnly: true}, service("", false, lb), false, false},
		{"class-less served before, class only", Policy{ClassOnly: true}, service("", true, lb), true, true},
		{"no longer a load balancer, class only", Policy{ClassOnly: true}, service("", true, corev1.ServiceTypeClusterIP), false, true},
		{"of another class", Policy{}, service("metallb.io/metallb", true, lb), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			view := tc.service.DeepCopy()
			tc.policy.View(view)
			if served(view) != tc.served || cleaned(view) != tc.cleaned {
				t.Fatalf("view %+v %v: served %v, cleaned up %v; want %v, %v", view.Spec.LoadBalancerClass, view.Finalizers, served(view), cleaned(view), tc.served, tc.cleaned)
			}
			if !slices.Contains(view.Finalizers, "example.org/other") {
				t.Fatalf("the view lost another finalizer: %v", view.Finalizers)
			}
			again := view.DeepCopy()
			tc.policy.View(again)
			if served(again) != tc.served || cleaned(again) != tc.cleaned {
				t.Fatal("a second View changed the view")
			}
			if tc.policy.Serves(view) != tc.served {
				t.Fatalf("Serves on the view = %v, want %v", tc.policy.Serves(view), tc.served)
			}
		})
	}
}
