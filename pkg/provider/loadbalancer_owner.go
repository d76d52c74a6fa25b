package provider

import (
	"context"
	"errors"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
)

// owners tells which LoadBalancers are the cluster's: see ironcore.Owners.
func (l *loadBalancers) owners(clusterName string) ironcore.Owners {
	return ironcore.Owners{Clusters: append([]string{l.settings.Cluster, clusterName}, l.settings.Aliases...), ID: l.settings.ClusterID}
}

// find returns the Service's LoadBalancer, or nil if it has none (see
// ironcore.Client.ServiceLoadBalancer); an ownership conflict is the Problem its event reports.
func (l *loadBalancers) find(ctx context.Context, clusterName string, service *corev1.Service, confirmMiss bool) (*networkingv1alpha1.LoadBalancer, error) {
	lb, err := l.ironcore.ServiceLoadBalancer(ctx, l.owners(clusterName), service, confirmMiss)
	return lb, l.conflict(err, service)
}

// replacedBy returns the Service's LoadBalancers, other than current, that a type switch to
// lbType replaces.
func (l *loadBalancers) replacedBy(ctx context.Context, clusterName string, service *corev1.Service, current *networkingv1alpha1.LoadBalancer, lbType networkingv1alpha1.LoadBalancerType) ([]*networkingv1alpha1.LoadBalancer, error) {
	return l.ironcore.ReplacedLoadBalancers(ctx, l.owners(clusterName), service, current, lbType)
}

// conflict turns an *ironcore.OwnershipConflict into the Problem its event reports, with a
// hint of what to do; any other error is returned as it is.
func (l *loadBalancers) conflict(err error, service *corev1.Service) error {
	var conflict *ironcore.OwnershipConflict
	if !errors.As(err, &conflict) {
		return err
	}
	return conflict.Problem(service, l.settings.Cluster)
}
