package ironcore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/clusterid"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/grants"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
)

// Owners tells which LoadBalancers are a cluster's: those recording one of its names (the
// configured one, the --cluster-name the service controller passes, which the reference CCM
// recorded, and the earlier names of clusterNameAliases), unless they carry another cluster's
// identity mark.
type Owners struct {
	Clusters []string
	ID       *clusterid.ID
}

// Owns reports whether lb was made for the Service (by UID, which a re-created Service does not
// share) of this cluster. An adopted LoadBalancer records the configured name from its next
// apply on. One marked with another cluster's identity is never this cluster's: only a CCM
// writes that mark, so another CCM manages it, and taking it over would make the two fight.
func (owners Owners) Owns(lb *networkingv1alpha1.LoadBalancer, service *corev1.Service) bool {
	owner := OwnerOf(lb)
	if owner.UID != string(service.UID) {
		return false
	}
	if mark, marked := lb.Labels[keys.LabelClusterID]; marked && owners.ID != nil {
		if id, known := owners.ID.Known(); known && mark != id {
			return false
		}
	}
	for _, cluster := range owners.Clusters {
		if cluster != "" && owner.Cluster == cluster {
			return true
		}
	}
	return false
}

// Retains reports whether lb is a LoadBalancer this cluster retained after its Service: marked
// retained, recording one of the cluster's names, and not marked with another cluster's
// identity.
func (owners Owners) Retains(lb *networkingv1alpha1.LoadBalancer) bool {
	if !Retained(lb) {
		return false
	}
	if mark, marked := lb.Labels[keys.LabelClusterID]; marked && owners.ID != nil {
		if id, known := owners.ID.Known(); known && mark != id {
			return false
		}
	}
	return slices.Contains(owners.Clusters, OwnerOf(lb).Cluster) && OwnerOf(lb).Cluster != ""
}

// NotAdoptable says why a LoadBalancer cannot be taken over by a Service.
type NotAdoptable struct {
	Name, Why string
	// Until says what would make the Service get a LoadBalancer.
	Until string
	// Waiting is set when the refusal is for this CCM to lift (it does not know enough yet).
	Waiting bool
	// OtherNamespace is set when the LoadBalancer is retained for another namespace.
	OtherNamespace bool
	// Held is set when the LoadBalancer holds an address the Service asks for: a new one with
	// that address would make two holders of it.
	Held bool
	// Fallback is set when the Service gets a new LoadBalancer instead, with other addresses.
	Fallback bool
}

// Problem is the refusal as its event on the Service reports it.
func (e *NotAdoptable) Problem() *lbspec.Problem {
	if e.Fallback {
		return &lbspec.Problem{Reason: lbspec.ReasonNotAdopted, Message: fmt.Sprintf(
			"%v; nothing of it was changed, and the Service gets a new LoadBalancer with an address IronCore chooses", e)}
	}
	return &lbspec.Problem{Reason: lbspec.ReasonNotAdopted, Message: fmt.Sprintf("%v; nothing was changed, and no other LoadBalancer is made until %s",
		e, cmp.Or(e.Until, "the LoadBalancer can be taken over, or is gone"))}
}

func (e *NotAdoptable) Error() string {
	if e.Name == "" {
		return e.Why
	}
	return fmt.Sprintf("IronCore LoadBalancer %s %s", e.Name, e.Why)
}

// AdoptableLoadBalancer returns the LoadBalancer named for the Service to take over
// (keys.AnnotationLoadBalancerName), read from the API server: the cache may not show yet that
// the Service took it over a moment ago. owned tells that the Service has it already;
// otherwise it is one this cluster retained that can become desired (Adoptable). Anything else
// is a *NotAdoptable saying why.
func (c *Client) AdoptableLoadBalancer(ctx context.Context, owners Owners, service *corev1.Service, name string, desired *networkingv1alpha1.LoadBalancer) (lb *networkingv1alpha1.LoadBalancer, owned bool, err error) {
	lb, err = c.LiveLoadBalancer(ctx, name)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, false, &NotAdoptable{Name: name, Why: "does not exist"}
	case err != nil:
		return nil, false, err
	case owners.Owns(lb, service):
		return lb, true, nil
	}
	return lb, false, owners.Adoptable(lb, desired, service.Namespace)
}

// Adoptable tells why lb cannot be taken over by a Service of namespace whose LoadBalancer is
// to be desired, or nil if it can: it must be retained by this cluster, provably (it carries
// this cluster's identity, which must be known: a cluster name may be shared or the default),
// for the Service's namespace (grants.RetainedFor), not being deleted, and of the same type, Network
// and IP families (a LoadBalancer cannot move, nor change its addresses' families in place).
// A refusal for another namespace does not name it: the Service's owner may not see it.
func (owners Owners) Adoptable(lb, desired *networkingv1alpha1.LoadBalancer, namespace string) error {
	id, known := owners.ID.Known()
	switch owner := OwnerOf(lb); {
	case Retained(lb) && !owners.Retains(lb):
		return &NotAdoptable{Name: lb.Name, Why: fmt.Sprintf("is not retained by this cluster: cluster %q retained it", owner.Cluster)}
	case !owners.Retains(lb):
		return &NotAdoptable{Name: lb.Name, Why: fmt.Sprintf("is not retained by this cluster: it records Service %s/%s of cluster %q", owner.Namespace, owner.Name, owner.Cluster)}
	case !known:
		return &NotAdoptable{Name: lb.Name, Why: "is not taken over while this CCM does not know its cluster's identity (the UID of namespace kube-system) to prove the LoadBalancer is this cluster's",
			Until: "this CCM has read its cluster's identity", Waiting: true}
	case lb.Labels[keys.LabelClusterID] != id:
		return &NotAdoptable{Name: lb.Name, Why: fmt.Sprintf("does not carry this cluster's identity (label %s=%s), so it cannot be proven this cluster's", keys.LabelClusterID, id)}
	case grants.RetainedFor(lb) != namespace:
		return &NotAdoptable{Name: lb.Name, Why: "is retained for another namespace", OtherNamespace: true,
			Until: "the platform team hands it to namespace " + namespace + " (annotation " + keys.AnnotationRetainedFor + " on the LoadBalancer)"}
	case lb.DeletionTimestamp != nil:
		return &NotAdoptable{Name: lb.Name, Why: "is being deleted"}
	case lb.Spec.Type != desired.Spec.Type:
		return &NotAdoptable{Name: lb.Name, Why: fmt.Sprintf("is %s and the Service asks for %s", lb.Spec.Type, desired.Spec.Type)}
	case lb.Spec.NetworkRef.Name != desired.Spec.NetworkRef.Name:
		return &NotAdoptable{Name: lb.Name, Why: fmt.Sprintf("is on Network %s, not on the cluster's Network %s", lb.Spec.NetworkRef.Name, desired.Spec.NetworkRef.Name)}
	case !slices.Equal(lb.Spec.IPFamilies, desired.Spec.IPFamilies):
		return &NotAdoptable{Name: lb.Name, Why: fmt.Sprintf("has the IP families %v and the Service asks for %v", lb.Spec.IPFamilies, desired.Spec.IPFamilies)}
	}
	return nil
}

// Addresses are lb's addresses.
func Addresses(lb *networkingv1alpha1.LoadBalancer) []string {
	addresses := make([]string, 0, len(lb.Status.IPs))
	for _, ip := range lb.Status.IPs {
		addresses = append(addresses, ip.String())
	}
	return addresses
}

// OwnershipConflict is a LoadBalancer under a name of the Service's that belongs to another
// Service or cluster.
type OwnershipConflict struct {
	LoadBalancer *networkingv1alpha1.LoadBalancer
	Owner        Owner
	// OtherID is the identity mark of the cluster whose CCM manages it, if it is not this
	// cluster's.
	OtherID string
}

func (e *OwnershipConflict) Error() string {
	return fmt.Sprintf("IronCore LoadBalancer %s/%s belongs to Service %s/%s (UID %q) of cluster %q",
		e.LoadBalancer.Namespace, e.LoadBalancer.Name, e.Owner.Namespace, e.Owner.Name, e.Owner.UID, e.Owner.Cluster)
}

// Problem is the conflict as its event on the Service of cluster reports it, with a hint of what
// to do.
func (e *OwnershipConflict) Problem(service *corev1.Service, cluster string) *lbspec.Problem {
	lb, owner := e.LoadBalancer, e.Owner
	hint := ""
	if e.OtherID != "" {
		hint = fmt.Sprintf(" (the CCM of the cluster with identity %s manages it)", e.OtherID)
	} else if owner.UID == string(service.UID) && owner.Cluster != "" {
		hint = fmt.Sprintf(" (if %q is an earlier name of this cluster, add it to the cloud-config's clusterNameAliases)", owner.Cluster)
	}
	return &lbspec.Problem{Reason: lbspec.ReasonOwnershipConflict, Message: fmt.Sprintf(
		"IronCore LoadBalancer %s/%s belongs to Service %s/%s (UID %q) of cluster %q%s, not to this Service of cluster %q; it is left alone",
		lb.Namespace, lb.Name, owner.Namespace, owner.Name, owner.UID, owner.Cluster, hint, cluster)}
}

// ServiceLoadBalancer returns the Service's LoadBalancer, or nil if it has none. It looks for
// LoadBalancers recording the Service's UID (of two, during a type switch, the one of the type
// the Service asks for), then at the names this and the reference CCM give them, in the cache
// and, with confirmMiss, if the cache knows none, at the API server, so that a LoadBalancer
// created a moment ago is not mistaken for a missing one (which would let a Service go without
// deleting it). A LoadBalancer under one of those names that is not the cluster's is an
// *OwnershipConflict.
func (c *Client) ServiceLoadBalancer(ctx context.Context, owners Owners, service *corev1.Service, confirmMiss bool) (*networkingv1alpha1.LoadBalancer, error) {
	owned, err := c.OwnedLoadBalancers(ctx, owners, service)
	if err != nil {
		return nil, err
	}
	if len(owned) > 0 {
		return current(service, owned), nil
	}
	// The names this and the reference CCM give a Service's LoadBalancer, under each of the
	// cluster's names, each once.
	names := []string{lbspec.Name(service)}
	for _, cluster := range owners.Clusters {
		if legacy := lbspec.LegacyName(cluster, service); cluster != "" && !slices.Contains(names, legacy) {
			names = append(names, legacy)
		}
	}
	for _, name := range names {
		lb, err := c.LoadBalancer(ctx, name)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return owners.Check(lb, service)
	}
	if !confirmMiss {
		return nil, nil
	}
	lb, err := c.LiveLoadBalancer(ctx, names[0])
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return owners.Check(lb, service)
}

// ServiceLoadBalancers returns, from the cache, the Service's LoadBalancer and, during a type
// switch, those the switch replaces: the ones its routing is written for. A LoadBalancer of
// someone else under the Service's name is none of them.
func (c *Client) ServiceLoadBalancers(ctx context.Context, owners Owners, service *corev1.Service) ([]*networkingv1alpha1.LoadBalancer, error) {
	lb, err := c.ServiceLoadBalancer(ctx, owners, service, false)
	var conflict *OwnershipConflict
	switch {
	case errors.As(err, &conflict):
		return nil, nil
	case err != nil || lb == nil:
		return nil, err
	}
	replaced, err := c.ReplacedLoadBalancers(ctx, owners, service, lb, lb.Spec.Type)
	if err != nil {
		return nil, err
	}
	return append([]*networkingv1alpha1.LoadBalancer{lb}, replaced...), nil
}

// ReplacedLoadBalancers returns the Service's LoadBalancers, other than current, that are not
// of lbType and not being deleted: those a type switch replaces.
func (c *Client) ReplacedLoadBalancers(ctx context.Context, owners Owners, service *corev1.Service, current *networkingv1alpha1.LoadBalancer, lbType networkingv1alpha1.LoadBalancerType) ([]*networkingv1alpha1.LoadBalancer, error) {
	owned, err := c.OwnedLoadBalancers(ctx, owners, service)
	if err != nil {
		return nil, err
	}
	if current != nil && !slices.ContainsFunc(owned, func(lb *networkingv1alpha1.LoadBalancer) bool { return lb.UID == current.UID }) {
		owned = append(owned, current) // found by name
	}
	var replaced []*networkingv1alpha1.LoadBalancer
	for _, lb := range owned {
		if lb.Spec.Type != lbType && lb.DeletionTimestamp == nil {
			replaced = append(replaced, lb)
		}
	}
	return replaced, nil
}

// OwnedLoadBalancers returns the LoadBalancers in the cache that record the Service's UID and
// this cluster: one, or two while its type switches.
func (c *Client) OwnedLoadBalancers(ctx context.Context, owners Owners, service *corev1.Service) ([]*networkingv1alpha1.LoadBalancer, error) {
	candidates, err := c.LoadBalancersOfService(ctx, service.UID)
	if err != nil {
		return nil, err
	}
	var owned []*networkingv1alpha1.LoadBalancer
	for i := range candidates {
		if owners.Owns(&candidates[i], service) {
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

// Check returns lb if it is the cluster's LoadBalancer of the Service, else an
// *OwnershipConflict.
func (owners Owners) Check(lb *networkingv1alpha1.LoadBalancer, service *corev1.Service) (*networkingv1alpha1.LoadBalancer, error) {
	if owners.Owns(lb, service) {
		return lb, nil
	}
	conflict := &OwnershipConflict{LoadBalancer: lb, Owner: OwnerOf(lb)}
	if owners.ID != nil {
		if id, known := owners.ID.Known(); known && lb.Labels[keys.LabelClusterID] != "" && lb.Labels[keys.LabelClusterID] != id {
			conflict.OtherID = lb.Labels[keys.LabelClusterID]
		}
	}
	return nil, conflict
}
