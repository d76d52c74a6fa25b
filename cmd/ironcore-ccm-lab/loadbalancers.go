package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/pkg/provider"
)

// demoService is a Service of the demo and how it is created.
type demoService struct {
	name    string
	options testenv.ServiceOptions
}

func demoServices() []demoService {
	return []demoService{
		{name: "web", options: testenv.ServiceOptions{DualStack: true}},
		{name: "internal-api", options: testenv.ServiceOptions{Annotations: map[string]string{keys.AnnotationInternalLoadBalancer: "true"}}},
	}
}

// loadBalancers creates Services of type LoadBalancer and shows the IronCore LoadBalancers
// the CCM made for them.
func loadBalancers(ctx context.Context, stack *testenv.Stack) error {
	fmt.Println("\nCreating Services of type LoadBalancer: web (Public, dual-stack) and internal-api (Internal)...")
	var services []*corev1.Service
	took := map[string]time.Duration{}
	for _, s := range demoServices() {
		created := time.Now()
		service, err := stack.CreateLoadBalancerService(ctx, s.name, s.options)
		if err != nil {
			return err
		}
		err = testenv.WaitFor(ctx, convergeTimeout, "an address for Service "+s.name, func(ctx context.Context) error {
			current, err := stack.TargetClientset.CoreV1().Services(service.Namespace).Get(ctx, service.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if len(current.Status.LoadBalancer.Ingress) == 0 {
				return errors.New("no address yet")
			}
			service = current
			return nil
		})
		if err != nil {
			return err
		}
		took[s.name] = time.Since(created)
		services = append(services, service)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "\nSERVICE\tEXTERNAL-IP\tIRONCORE LOADBALANCER\tTYPE\tROUTED TO\tTIME TO ADDRESS")
	for _, service := range services {
		var ips []string
		for _, ingress := range service.Status.LoadBalancer.Ingress {
			ips = append(ips, ingress.IP)
		}
		lbName := provider.LoadBalancerName(service)
		lb := &networkingv1alpha1.LoadBalancer{}
		if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: lbName}, lb); err != nil {
			return err
		}
		targets, err := routedTo(ctx, stack, lbName)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", service.Name, strings.Join(ips, ","), lbName, lb.Spec.Type, targets, took[service.Name].Round(time.Millisecond))
	}
	return w.Flush()
}

// routedTo lists the NetworkInterfaces IronCore routes the LoadBalancer's traffic to, once
// IronCore's routing includes every target NetworkInterface.
func routedTo(ctx context.Context, stack *testenv.Stack, lbName string) (string, error) {
	var targets []string
	err := testenv.WaitFor(ctx, convergeTimeout, "routing of "+lbName, func(ctx context.Context) error {
		routing := &networkingv1alpha1.LoadBalancerRouting{}
		if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: lbName}, routing); err != nil {
			return err
		}
		targets = nil
		for _, destination := range routing.Destinations {
			if destination.TargetRef != nil && !slices.Contains(targets, destination.TargetRef.Name) {
				targets = append(targets, destination.TargetRef.Name)
			}
		}
		if len(targets) < len(demoWorkers()) {
			return fmt.Errorf("routed to %v", targets)
		}
		slices.Sort(targets)
		return nil
	})
	return strings.Join(targets, ","), err
}
