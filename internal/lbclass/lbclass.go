// Package lbclass decides which Services of type LoadBalancer this CCM serves: those of its own
// load balancer class, and class-less ones unless another implementation (MetalLB, Cilium's
// LB-IPAM) is the cluster's default. Every controller that acts on Services asks the same
// Policy, so that none of them touches a Service another one leaves alone.
package lbclass

import (
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	servicehelpers "k8s.io/cloud-provider/service/helpers"
)

// Name is this CCM's load balancer class, for spec.loadBalancerClass.
const Name = "ironcore.dev/load-balancer"

// hidden is the class a Service that is not this CCM's shows the service controller of the
// class (see View): any class other than none makes the upstream controller leave it alone.
const hidden = "ironcore.dev/not-served-here"

// Policy says which Services are this CCM's. The zero value is the default: class-less
// Services and those of class Name.
type Policy struct {
	// ClassOnly leaves class-less Services to another implementation
	// (--default-load-balancer=false): only Services of class Name are served, and class-less
	// ones that already carry the load balancer cleanup finalizer (served before the flag was
	// set), until they are deleted.
	ClassOnly bool
}

// Serves tells whether the Service is this CCM's: type LoadBalancer, and of class Name, or
// class-less and not left to another implementation.
func (p Policy) Serves(service *corev1.Service) bool {
	if service.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return false
	}
	if view, ok := service.Annotations[viewAnnotation]; ok {
		// The service controller's view of it (see View), passed on by the provider.
		return view == "served"
	}
	if service.Spec.LoadBalancerClass != nil {
		return *service.Spec.LoadBalancerClass == Name
	}
	return !p.ClassOnly || servicehelpers.HasLBFinalizer(service)
}

// Wants tells whether the Service should have a load balancer now: Serves, and not being
// deleted.
func (p Policy) Wants(service *corev1.Service) bool {
	return p.Serves(service) && service.DeletionTimestamp == nil
}

// Foreign tells whether another implementation serves the Service: it has a load balancer class
// other than Name. A class-less Service is never foreign, whatever ClassOnly says: a
// LoadBalancer made for it before stays its own.
func Foreign(service *corev1.Service) bool {
	return service.Spec.LoadBalancerClass != nil && *service.Spec.LoadBalancerClass != Name
}

// viewAnnotation marks a Service as View left it, in the cache only, so that View changes a
// Service once: a second pass would take a class-less view for a class-less Service.
const viewAnnotation = "cache.ironcore-ccm.internal/load-balancer-class-view"

// View changes a Service, as the upstream service controller sees it, in place (it is an
// informer transform). The upstream controller serves only class-less Services, so a Service
// of class Name is shown without its class. A class-less Service is shown as it is, unless
// class-less Services are left to another implementation (ClassOnly) and it does not carry the
// cleanup finalizer. Every other Service is shown with another class and without the cleanup
// finalizer, so that the controller neither serves nor cleans it up. Only the class, the
// finalizers and an annotation of the view differ from the Service, and the controller writes
// patches of status and finalizers computed against the view, so none of them reaches the API
// server but the finalizers.
func (p Policy) View(service *corev1.Service) {
	if _, done := service.Annotations[viewAnnotation]; done {
		return
	}
	class := service.Spec.LoadBalancerClass
	view := "served"
	switch {
	case class != nil && *class == Name:
		service.Spec.LoadBalancerClass = nil
	case class == nil && (!p.ClassOnly || servicehelpers.HasLBFinalizer(service)):
	default:
		view = "hidden"
		other := hidden
		service.Spec.LoadBalancerClass = &other
		service.Finalizers = slices.DeleteFunc(slices.Clone(service.Finalizers), func(f string) bool {
			return f == servicehelpers.LoadBalancerCleanupFinalizer
		})
	}
	annotations := maps.Clone(service.Annotations)
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[viewAnnotation] = view
	service.Annotations = annotations
}

// ServiceInformers returns an informer factory for the upstream service controller, whose
// Services are shown as View shows them, without managed fields. Start it once the controller
// has asked for its informer.
func (p Policy) ServiceInformers(client kubernetes.Interface, resync time.Duration) informers.SharedInformerFactory {
	return informers.NewSharedInformerFactoryWithOptions(client, resync, informers.WithTransform(func(obj any) (any, error) {
		if service, ok := obj.(*corev1.Service); ok {
			service.ManagedFields = nil
			p.View(service)
		}
		return obj, nil
	}))
}
