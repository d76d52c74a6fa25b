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
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/pkg/provider"
)

// demoService is a Service of the demo and how it is created; endpointsOn are the Nodes of its
// endpoints, for a Local Service.
type demoService struct {
	name        string
	options     testenv.ServiceOptions
	endpointsOn []string
}

func demoServices() []demoService {
	return []demoService{
		{name: "web", options: testenv.ServiceOptions{DualStack: true}},
		{name: "internal-api", options: testenv.ServiceOptions{Annotations: map[string]string{keys.AnnotationInternalLoadBalancer: "true"}}},
		{name: "checkout", options: testenv.ServiceOptions{ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal}, endpointsOn: []string{"worker-a"}},
	}
}

// loadBalancers creates Services of type LoadBalancer and shows the IronCore LoadBalancers
// the CCM made for them.
func loadBalancers(ctx context.Context, stack *testenv.Stack) error {
	fmt.Println("\nCreating Services of type LoadBalancer: web (Public, dual-stack), internal-api (Internal) and checkout " +
		"(externalTrafficPolicy Local, its one Pod on worker-a)...")
	var services []*corev1.Service
	took := map[string]time.Duration{}
	targets := map[string]int{}
	for _, s := range demoServices() {
		created := time.Now()
		service, err := stack.CreateLoadBalancerService(ctx, s.name, s.options)
		if err != nil {
			return err
		}
		targets[s.name] = len(demoWorkers())
		if len(s.endpointsOn) > 0 {
			var endpoints []testenv.Endpoint
			for i, node := range s.endpointsOn {
				endpoints = append(endpoints, testenv.Endpoint{IP: fmt.Sprintf("10.244.1.%d", 10+i), Node: node, Ready: true, Serving: true})
			}
			if err := stack.SetEndpoints(ctx, service, endpoints); err != nil {
				return err
			}
			targets[s.name] = len(s.endpointsOn)
		}
		service, err = waitForAddress(ctx, stack, service.Namespace, service.Name)
		if err != nil {
			return err
		}
		took[s.name] = time.Since(created)
		services = append(services, service)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "\nSERVICE\tEXTERNAL-IP\tIRONCORE LOADBALANCER\tTYPE\tROUTED TO\tTIME TO ADDRESS")
	for _, service := range services {
		ips := testenv.IngressIPs(service)
		lbName := lbspec.Name(service)
		lb := &networkingv1alpha1.LoadBalancer{}
		if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: lbName}, lb); err != nil {
			return err
		}
		routed, err := routedTo(ctx, stack, lbName, func(names []string) bool { return len(names) == targets[service.Name] })
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", service.Name, strings.Join(ips, ","), lbName, lb.Spec.Type, routed, took[service.Name].Round(time.Millisecond))
	}
	return w.Flush()
}

// routedTo lists the NetworkInterfaces IronCore routes the LoadBalancer's traffic to, once
// they are what done accepts.
func routedTo(ctx context.Context, stack *testenv.Stack, lbName string, done func([]string) bool) (string, error) {
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
		if !done(targets) {
			return fmt.Errorf("routed to %v", targets)
		}
		slices.Sort(targets)
		return nil
	})
	return strings.Join(targets, ","), err
}

// loadBalancerOfService names the IronCore LoadBalancer of the demo's Service: the one that
// records it, which a Service that took over a retained one does not have under its own name.
func loadBalancerOfService(ctx context.Context, stack *testenv.Stack, namespace, name string) (string, error) {
	service, err := stack.TargetClientset.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	lbs := &networkingv1alpha1.LoadBalancerList{}
	if err := stack.IronCore.Client.List(ctx, lbs, client.InNamespace(stack.Namespace), client.MatchingLabels{keys.LabelServiceUID: string(service.UID)}); err != nil {
		return "", err
	}
	if len(lbs.Items) != 1 {
		return "", fmt.Errorf("%d IronCore LoadBalancers record Service %s/%s", len(lbs.Items), namespace, name)
	}
	return lbs.Items[0].Name, nil
}

// keepAnAddress annotates web to retain its LoadBalancer, deletes it, and installs it again in
// another namespace asking for its address: refused, as the address stays with its namespace,
// until the platform team hands the LoadBalancer to that namespace; then it gets the same
// LoadBalancer and address.
func keepAnAddress(ctx context.Context, stack *testenv.Stack) error {
	fmt.Println("\nKeeping an address: web annotated " + keys.AnnotationRetainLoadBalancer + "=true, deleted, and installed again in namespace shop with " +
		keys.AnnotationLoadBalancerIPs + " set to its old address; the platform team hands the address to shop...")
	services := stack.TargetClientset.CoreV1().Services(metav1.NamespaceDefault)
	web, err := services.Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		return err
	}
	web.Annotations = map[string]string{keys.AnnotationRetainLoadBalancer: "true"}
	if web, err = services.Update(ctx, web, metav1.UpdateOptions{}); err != nil {
		return err
	}
	lbName, addresses := lbspec.Name(web), testenv.IngressIPs(web)
	if err := services.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		return err
	}
	err = testenv.WaitFor(ctx, convergeTimeout, "LoadBalancer "+lbName+" retained", func(ctx context.Context) error {
		lb := &networkingv1alpha1.LoadBalancer{}
		if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: lbName}, lb); err != nil {
			return err
		}
		if lb.Labels[keys.LabelRetained] != "true" {
			return errors.New("not retained yet")
		}
		return nil
	})
	if err != nil {
		return err
	}
	if _, err := routedTo(ctx, stack, lbName, func(names []string) bool { return len(names) == 0 }); err != nil {
		return err
	}
	fmt.Printf("  web deleted: IronCore LoadBalancer %s kept with %s, routed nowhere\n", lbName, strings.Join(addresses, ","))
	if _, err := stack.TargetClientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	created := time.Now()
	again, err := stack.CreateLoadBalancerService(ctx, "web", testenv.ServiceOptions{Namespace: "shop", DualStack: true,
		Annotations: map[string]string{keys.AnnotationLoadBalancerIPs: strings.Join(addresses, ",")}})
	if err != nil {
		return err
	}
	refusal, err := stack.WaitForEvent(ctx, convergeTimeout, again, provider.ReasonNotAdopted)
	if err != nil {
		return err
	}
	fmt.Printf("  shop/web before the handover: no address, event %s: %s\n", provider.ReasonNotAdopted, refusal)
	handover := `{"metadata":{"annotations":{"` + keys.AnnotationRetainedFor + `":"shop"}}}`
	retained := &networkingv1alpha1.LoadBalancer{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: lbName}}
	if err := stack.IronCore.Client.Patch(ctx, retained, client.RawPatch(types.MergePatchType, []byte(handover))); err != nil {
		return err
	}
	fmt.Printf("  platform team: kubectl annotate loadbalancers.networking.ironcore.dev %s %s=shop\n", lbName, keys.AnnotationRetainedFor)
	again, err = waitForAddress(ctx, stack, "shop", "web")
	if err != nil {
		return err
	}
	routed, err := routedTo(ctx, stack, lbName, func(names []string) bool { return len(names) == len(demoWorkers()) })
	if err != nil {
		return err
	}
	same := "the same address"
	if !slices.Equal(testenv.IngressIPs(again), addresses) {
		same = "ANOTHER address"
	}
	fmt.Printf("  shop/web: %s (%s), IronCore LoadBalancer %s, routed to %s, %s after it was created\n",
		strings.Join(testenv.IngressIPs(again), ","), same, lbName, routed, time.Since(created).Round(time.Millisecond))
	return nil
}

// waitForAddress waits until the Service has an address, and returns it as it is then.
func waitForAddress(ctx context.Context, stack *testenv.Stack, namespace, name string) (*corev1.Service, error) {
	var service *corev1.Service
	err := testenv.WaitFor(ctx, convergeTimeout, "an address for Service "+namespace+"/"+name, func(ctx context.Context) error {
		current, err := stack.TargetClientset.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(current.Status.LoadBalancer.Ingress) == 0 {
			return errors.New("no address yet")
		}
		service = current
		return nil
	})
	return service, err
}
