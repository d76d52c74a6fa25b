package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	servicehelpers "k8s.io/cloud-provider/service/helpers"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbclass"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv/apiproxy"
)

// TestALoadBalancerClassOfItsOwn runs the CCM beside another load balancer implementation: a
// Service of class ironcore.dev/load-balancer is served end to end (address, routing, a port
// change, deletion without leftovers), a Service of another class is never touched, and a
// class-less one is served by default and never touched with --default-load-balancer=false.
// "Never touched" is checked after the CCM acted on a later change of its own Service: no
// finalizer, no status, no event, no IronCore write under its LoadBalancer's name (the
// CCM's own IronCore proxy logs every write) and no mention in the CCM's log.
func TestALoadBalancerClassOfItsOwn(t *testing.T) {
	for _, tc := range []struct {
		name          string
		args          []string
		classlessOurs bool
	}{
		{name: "default", classlessOurs: true},
		{name: "class-only", args: []string{"--default-load-balancer=false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "ccm-class-" + tc.name
			proxy, kubeconfig, err := stack.StartIronCoreProxy(name)
			if err != nil {
				t.Fatal(err)
			}
			ccm := startCCM(t, name, append(slices.Clone(tc.args), "--ironcore-kubeconfig="+kubeconfig)...)
			node := "class-" + tc.name
			worker(t, node)

			classless := createService(t, "classless-"+tc.name, testenv.ServiceOptions{})
			foreign := createService(t, "foreign-"+tc.name, testenv.ServiceOptions{LoadBalancerClass: "example.org/other"})
			ours := createService(t, "ours-"+tc.name, testenv.ServiceOptions{LoadBalancerClass: lbclass.Name})
			waitForIngress(t, ours, anyIngress)
			stack.WaitForRouting(t, waitTimeout, lbspec.Name(ours), stack.NetworkInterfaceIPs(t, node))
			if tc.classlessOurs {
				waitForIngress(t, classless, anyIngress)
			}

			// Changes to all three; the CCM acts on its own Service's.
			for _, service := range []*corev1.Service{classless, foreign} {
				setAnnotation(t, service, "example.org/touched", "yes")
			}
			addPort(t, ours, 8080)
			waitForLoadBalancerPort(t, lbspec.Name(ours), 8080)

			untouched := []*corev1.Service{foreign}
			if !tc.classlessOurs {
				untouched = append(untouched, classless)
			}
			log := readLog(ccm)
			for _, service := range untouched {
				requireUntouched(t, service, proxy.Writes(), log)
			}

			// The class cannot change while the Service is a LoadBalancer. One that stops being
			// one loses its class and its LoadBalancer; made one again of another class, it is
			// someone else's.
			lbName := lbspec.Name(ours)
			setType(t, ours, corev1.ServiceTypeClusterIP, nil)
			waitForNoLeftovers(t, []string{lbName})
			waitForService(t, ours, "no load balancer cleanup finalizer", func(service *corev1.Service) error {
				if servicehelpers.HasLBFinalizer(service) || service.Spec.LoadBalancerClass != nil {
					return fmt.Errorf("finalizers %v, class %v", service.Finalizers, service.Spec.LoadBalancerClass)
				}
				return nil
			})
			other := "example.org/other"
			proxy.Reset()
			setType(t, ours, corev1.ServiceTypeLoadBalancer, &other)
			addPort(t, classless, 9090)
			if tc.classlessOurs {
				waitForLoadBalancerPort(t, lbspec.Name(classless), 9090)
			} else {
				setAnnotation(t, foreign, "example.org/touched", "again")
				retouched := createService(t, "ours-again-"+tc.name, testenv.ServiceOptions{LoadBalancerClass: lbclass.Name})
				waitForIngress(t, retouched, anyIngress)
			}
			if live := stack.LiveService(t, ours); servicehelpers.HasLBFinalizer(live) || len(live.Status.LoadBalancer.Ingress) > 0 {
				t.Errorf("Service %s of another class: finalizers %v, ingress %v", live.Name, live.Finalizers, live.Status.LoadBalancer.Ingress)
			}
			for _, write := range proxy.Writes() {
				if write.Name == lbName {
					t.Errorf("the CCM wrote %s %s %s after the Service took another class", write.Verb, write.Resource, write.Name)
				}
			}
			if err := deleteService(ours); err != nil {
				t.Fatal(err)
			}
			waitForServiceGone(t, ours)
			if tc.classlessOurs {
				if err := deleteService(classless); err != nil {
					t.Fatal(err)
				}
				waitForServiceGone(t, classless)
				waitForNoLeftovers(t, []string{lbspec.Name(classless)})
			}
		})
	}
}

// requireUntouched fails the test if anything shows that the CCM acted on the Service.
func requireUntouched(t *testing.T, service *corev1.Service, writes []apiproxy.Write, log string) {
	t.Helper()
	ctx := context.Background()
	live, err := stack.TargetClientset.CoreV1().Services(service.Namespace).Get(ctx, service.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if servicehelpers.HasLBFinalizer(live) || len(live.Status.LoadBalancer.Ingress) > 0 {
		t.Errorf("Service %s: finalizers %v, ingress %v; want it untouched", service.Name, live.Finalizers, live.Status.LoadBalancer.Ingress)
	}
	events, err := stack.TargetClientset.CoreV1().Events(service.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Service,involvedObject.name=" + service.Name,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, event := range events.Items {
		// The API server's repair of cluster IPs and node ports reports on any Service it finds
		// mid-allocation, whoever serves it.
		if event.ReportingController == "ipallocator-repair-controller" || event.ReportingController == "portallocator-repair-controller" {
			continue
		}
		t.Errorf("Service %s has an event from %q: %s %s", service.Name, event.ReportingController+event.Source.Component, event.Reason, event.Message)
	}
	lbName := lbspec.Name(service)
	for _, write := range writes {
		if write.Name == lbName {
			t.Errorf("Service %s: the CCM wrote %s %s %s", service.Name, write.Verb, write.Resource, write.Name)
		}
	}
	err = stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: lbName}, &networkingv1alpha1.LoadBalancer{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("Service %s: IronCore LoadBalancer %s: %v, want none", service.Name, lbName, err)
	}
	if strings.Contains(log, service.Name) {
		t.Errorf("the CCM's log mentions Service %s", service.Name)
	}
}

func addPort(t *testing.T, service *corev1.Service, port int32) {
	t.Helper()
	err := updateService(context.Background(), service, func(live *corev1.Service) {
		live.Spec.Ports = append(live.Spec.Ports, corev1.ServicePort{Name: fmt.Sprintf("p%d", port), Protocol: corev1.ProtocolTCP, Port: port})
	})
	if err != nil {
		t.Fatal(err)
	}
}

func waitForLoadBalancerPort(t *testing.T, lbName string, port int32) {
	t.Helper()
	testenv.Await(t, context.Background(), waitTimeout, fmt.Sprintf("LoadBalancer %s with port %d", lbName, port), func(ctx context.Context) error {
		lb := &networkingv1alpha1.LoadBalancer{}
		if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: lbName}, lb); err != nil {
			return err
		}
		for _, p := range lb.Spec.Ports {
			if p.Port == port {
				return nil
			}
		}
		return fmt.Errorf("ports %v", lb.Spec.Ports)
	})
}

func setType(t *testing.T, service *corev1.Service, serviceType corev1.ServiceType, class *string) {
	t.Helper()
	err := updateService(context.Background(), service, func(live *corev1.Service) {
		live.Spec.Type, live.Spec.LoadBalancerClass = serviceType, class
		if serviceType != corev1.ServiceTypeLoadBalancer {
			live.Spec.ExternalTrafficPolicy, live.Spec.AllocateLoadBalancerNodePorts = "", nil
			for i := range live.Spec.Ports {
				live.Spec.Ports[i].NodePort = 0
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}

func waitForService(t *testing.T, service *corev1.Service, what string, check func(*corev1.Service) error) {
	t.Helper()
	testenv.Await(t, context.Background(), waitTimeout, "Service "+service.Name+" with "+what, func(ctx context.Context) error {
		live, err := stack.TargetClientset.CoreV1().Services(service.Namespace).Get(ctx, service.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		return check(live)
	})
}
