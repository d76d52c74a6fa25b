package lbtargets

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/targetrules"
)

// Triggers that queue the Services whose targets a change concerns.

// queueAllTargets queues the target labels and every Service of type LoadBalancer, after the
// delay: changes that concern every Service gather for the coalescing delay, and the queue
// holds a key once however many come.
func (t *Controller) queueAllTargets(delay time.Duration) {
	t.queue.AddAfter(key{kind: labelsKind}, delay)
	t.queueServices(func(*corev1.Service) bool { return true }, delay)
}

// queueServices queues, after the delay, the routing keys of the Services of type
// LoadBalancer that match.
func (t *Controller) queueServices(match func(*corev1.Service) bool, delay time.Duration) {
	services, err := t.listers.services.List(labels.Everything())
	if err != nil {
		klog.ErrorS(err, "Cannot list the Services whose targets to sync")
		return
	}
	for _, service := range services {
		if t.class.Wants(service) && match(service) {
			t.queue.AddAfter(routingKey(serviceName(service.Namespace, service.Name)), delay)
		}
	}
}

// endpointSliceChanged queues the Local Service of type LoadBalancer the EndpointSlice belongs
// to, after the delay; the queue holds a key once however many changes come.
func (t *Controller) endpointSliceChanged(slice *discoveryv1.EndpointSlice, delay time.Duration) {
	name := slice.Labels[discoveryv1.LabelServiceName]
	if name == "" {
		return
	}
	service, err := t.listers.services.Services(slice.Namespace).Get(name)
	if err != nil || !t.class.Wants(service) || !targetrules.Local(service) {
		return
	}
	t.queue.AddAfter(routingKey(serviceName(service.Namespace, service.Name)), delay)
}

// recordAddress records whether a Service of this CCM shows an address, for the queue's order.
func (t *Controller) recordAddress(service *corev1.Service) {
	name := serviceName(service.Namespace, service.Name)
	if t.class.Wants(service) && len(service.Status.LoadBalancer.Ingress) == 0 {
		t.routing.unaddressed.Store(name, true)
	} else {
		t.routing.unaddressed.Delete(name)
	}
}
