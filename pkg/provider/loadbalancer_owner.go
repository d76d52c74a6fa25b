package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
)

func ownedBy(obj metav1.Object, owner *networkingv1alpha1.LoadBalancer) bool {
	for _, ref := range obj.GetOwnerReferences() {
		if ref.UID == owner.UID {
			return true
		}
	}
	return false
}

// find returns the Service's LoadBalancer, or nil if it has none. It looks for LoadBalancers
// recording the Service's UID (of two, during a type switch, the one of the type the Service
// asks for: see current), then at the names this and the reference CCM give them, in the
// cache and, with confirmMiss, if the cache knows none, at the API server, so that a
// LoadBalancer created a moment ago is not mistaken for a missing one (which would let a
// Service go without deleting it). A LoadBalancer under one of those names that belongs to
// another cluster or Service is an ownership conflict.
func (l *loadBalancers) find(ctx context.Context, clusterName string, service *corev1.Service, confirmMiss bool) (*networkingv1alpha1.LoadBalancer, error) {
	// The cluster's names: the configured one, the --cluster-name the service controller passes
	// (which the reference CCM recorded), and the earlier names of clusterNameAliases.
	owners := l.owners(clusterName)
	owned, err := l.ownedOfService(ctx, owners, service)
	if err != nil {
		return nil, err
	}
	if len(owned) > 0 {
		return current(service, owned), nil
	}
	// The names this and the reference CCM give a Service's LoadBalancer, under each of the
	// cluster's names, each once.
	names := []string{lbspec.Name(service)}
	for _, owner := range owners {
		legacy := lbspec.LegacyName(owner, service)
		seen := false
		for _, name := range names {
			seen = seen || name == legacy
		}
		if owner != "" && !seen {
			names = append(names, legacy)
		}
	}
	for _, name := range names {
		lb, err := l.ironcore.LoadBalancer(ctx, name)
		if errors.Is(err, ironcore.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return l.ownedOrConflict(lb, owners, service)
	}
	if !confirmMiss {
		return nil, nil
	}
	lb, err := l.ironcore.LiveLoadBalancer(ctx, names[0])
	if errors.Is(err, ironcore.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return l.ownedOrConflict(lb, owners, service)
}

// owners are the cluster's names: the configured one, the --cluster-name the service
// controller passes (which the reference CCM recorded), and the earlier names of
// clusterNameAliases.
func (l *loadBalancers) owners(clusterName string) []string {
	return append([]string{l.settings.Cluster, clusterName}, l.settings.Aliases...)
}

// ownedOfService returns the LoadBalancers in the cache that record the Service's UID and this
// cluster: one, or two while its type switches.
func (l *loadBalancers) ownedOfService(ctx context.Context, owners []string, service *corev1.Service) ([]*networkingv1alpha1.LoadBalancer, error) {
	candidates, err := l.ironcore.LoadBalancersOfService(ctx, service.UID)
	if err != nil {
		return nil, err
	}
	var owned []*networkingv1alpha1.LoadBalancer
	for i := range candidates {
		if l.owns(&candidates[i], owners, service) {
			owned = append(owned, &candidates[i])
		}
	}
	return owned, nil
}

// current picks the Service's LoadBalancer among those it owns: the one of the type it asks
// for, not being deleted; else one not being deleted; else the first.
func current(service *corev1.Service, owned []*networkingv1alpha1.LoadBalancer) *networkingv1alpha1.LoadBalancer {
	want := networkingv1alpha1.LoadBalancerTypePublic
	if internal, err := lbspec.Internal(service); err == nil && internal {
		want = networkingv1alpha1.LoadBalancerTypeInternal
	}
	var live *networkingv1alpha1.LoadBalancer
	for _, lb := range owned {
		if lb.DeletionTimestamp != nil {
			continue
		}
		if lb.Spec.Type == want {
			return lb
		}
		if live == nil {
			live = lb
		}
	}
	if live != nil {
		return live
	}
	return owned[0]
}

// successorName names the LoadBalancer that replaces existing when the Service's type switches:
// the Service's name (see lbspec.Name) if existing has another, else that name with the type.
func successorName(service *corev1.Service, existing *networkingv1alpha1.LoadBalancer, lbType networkingv1alpha1.LoadBalancerType) string {
	name := lbspec.Name(service)
	if existing.Name != name {
		return name
	}
	return name + "-" + strings.ToLower(string(lbType))
}

// findOwn is find from the cache, for the target reconcilers: a LoadBalancer of someone else
// under the Service's name is none of theirs (the Service's sync reports the conflict).
func (l *loadBalancers) findOwn(ctx context.Context, clusterName string, service *corev1.Service) (*networkingv1alpha1.LoadBalancer, error) {
	lb, err := l.find(ctx, clusterName, service, false)
	var conflict *lbspec.Problem
	if errors.As(err, &conflict) {
		return nil, nil
	}
	return lb, err
}

// findAllOwn is findOwn with, during a type switch, the LoadBalancers the switch replaces.
func (l *loadBalancers) findAllOwn(ctx context.Context, clusterName string, service *corev1.Service) ([]*networkingv1alpha1.LoadBalancer, error) {
	lb, err := l.findOwn(ctx, clusterName, service)
	if err != nil || lb == nil {
		return nil, err
	}
	replaced, err := l.replacedBy(ctx, clusterName, service, lb, lb.Spec.Type)
	if err != nil {
		return nil, err
	}
	return append([]*networkingv1alpha1.LoadBalancer{lb}, replaced...), nil
}

func (l *loadBalancers) ownedOrConflict(lb *networkingv1alpha1.LoadBalancer, owners []string, service *corev1.Service) (*networkingv1alpha1.LoadBalancer, error) {
	if l.owns(lb, owners, service) {
		return lb, nil
	}
	owner := ironcore.OwnerOf(lb)
	hint := ""
	if id, known := l.settings.ClusterID.Known(); known && lb.Labels[keys.LabelClusterID] != "" && lb.Labels[keys.LabelClusterID] != id {
		hint = fmt.Sprintf(" (the CCM of the cluster with identity %s manages it)", lb.Labels[keys.LabelClusterID])
	} else if owner.UID == string(service.UID) && owner.Cluster != "" {
		hint = fmt.Sprintf(" (if %q is an earlier name of this cluster, add it to the cloud-config's clusterNameAliases)", owner.Cluster)
	}
	return nil, &lbspec.Problem{Reason: ReasonOwnershipConflict, Message: fmt.Sprintf(
		"IronCore LoadBalancer %s/%s belongs to Service %s/%s (UID %q) of cluster %q%s, not to this Service of cluster %q; it is left alone",
		lb.Namespace, lb.Name, owner.Namespace, owner.Name, owner.UID, owner.Cluster, hint, l.settings.Cluster)}
}

// owns reports whether lb was made for this Service (by UID, which a re-created Service does
// not share) of this cluster. The cluster may be recorded as the configured name, one of its
// aliases or, by the reference CCM, as the --cluster-name it was given; an adopted
// LoadBalancer records the configured name from its next apply on. A LoadBalancer marked with
// another cluster's identity is never this cluster's: only a CCM writes that mark, so another
// CCM manages it, and taking it over would make the two fight over it.
func (l *loadBalancers) owns(lb *networkingv1alpha1.LoadBalancer, clusters []string, service *corev1.Service) bool {
	owner := ironcore.OwnerOf(lb)
	if owner.UID != string(service.UID) {
		return false
	}
	if mark, marked := lb.Labels[keys.LabelClusterID]; marked {
		if id, known := l.settings.ClusterID.Known(); known && mark != id {
			return false
		}
	}
	for _, cluster := range clusters {
		if cluster != "" && owner.Cluster == cluster {
			return true
		}
	}
	return false
}
