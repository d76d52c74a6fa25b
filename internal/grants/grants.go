// Package grants holds the rules of who may use which address: the namespace a retained
// LoadBalancer belongs to, and whether a Prefix is a pool a namespace's Services may name. The
// platform team, who owns IronCore, grants both on IronCore objects; a Service annotation alone
// never does. The rules read objects only, so they are tested and fuzzed alone.
package grants

import (
	"fmt"
	"strings"

	ipamv1alpha1 "github.com/ironcore-dev/ironcore/api/ipam/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
)

// RetainedFor is the namespace whose Services may take over lb, retained: the one the platform
// team handed it to (keys.AnnotationRetainedFor), or else the one it was retained from.
func RetainedFor(lb *networkingv1alpha1.LoadBalancer) string {
	if namespace := strings.TrimSpace(lb.Annotations[keys.AnnotationRetainedFor]); namespace != "" {
		return namespace
	}
	namespace, _, _ := strings.Cut(lb.Annotations[keys.AnnotationRetainedFrom], "/")
	return namespace
}

// RetainedAfter tells whether lb was retained after the Service namespace/name.
func RetainedAfter(lb *networkingv1alpha1.LoadBalancer, namespace, name string) bool {
	return lb.Labels[keys.LabelRetained] == "true" && lb.Annotations[keys.AnnotationRetainedFrom] == namespace+"/"+name
}

// Pool says why a Service of namespace may not take addresses from prefix, or is "" if it may:
// the platform team designated it for Services (keys.LabelLoadBalancerPool), and for the
// namespace if it names namespaces (keys.AnnotationLoadBalancerPoolNamespaces). A Prefix
// another object controls (a NetworkInterface's pod CIDR, a LoadBalancer's address) or a single
// address is never a pool, whatever its labels.
func Pool(prefix *ipamv1alpha1.Prefix, namespace string) string {
	if owner := metav1.GetControllerOf(prefix); owner != nil {
		return fmt.Sprintf("belongs to %s %s, and is no pool for Services", owner.Kind, owner.Name)
	}
	if single(prefix) {
		return "is a single address, and no pool for Services"
	}
	if prefix.Labels[keys.LabelLoadBalancerPool] != "true" {
		return fmt.Sprintf("is not designated for Services' addresses (label %s=true on the Prefix, set by the platform team)", keys.LabelLoadBalancerPool)
	}
	list, limited := prefix.Annotations[keys.AnnotationLoadBalancerPoolNamespaces]
	if !limited || (namespace != "" && Listed(list, namespace)) {
		return ""
	}
	return "is not given to this namespace"
}

// Listed tells whether namespace is one of the comma-separated names in list.
func Listed(list, namespace string) bool {
	for _, name := range strings.Split(list, ",") {
		if strings.TrimSpace(name) == namespace {
			return true
		}
	}
	return false
}

// single tells whether prefix is (or is to be) a single address.
func single(prefix *ipamv1alpha1.Prefix) bool {
	if prefix.Spec.Prefix != nil {
		return prefix.Spec.Prefix.Bits() == prefix.Spec.Prefix.Addr().BitLen()
	}
	length := prefix.Spec.PrefixLength
	return (prefix.Spec.IPFamily == corev1.IPv4Protocol && length == 32) || (prefix.Spec.IPFamily == corev1.IPv6Protocol && length == 128)
}
