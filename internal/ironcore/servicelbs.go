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
// configured one, --cluster-name, the aliases), unless they carry another cluster's identity.
type Owners struct {
	Clusters []string
	ID       *clusterid.ID
}

// Owns reports whether lb was made for the Service (by UID) of this cluster, under any of its
// names. One marked with another cluster's identity is another CCM's: taking it over would make
// the two fight.
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

// Retains reports whether lb is a LoadBalancer this cluster retained after its Service.
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
	// Waiting is set when the refusal lasts only until this CCM knows more.
	Waiting        bool
	OtherNamespace bool
	// Held is set when the LoadBalancer holds an address the Service asks for.
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

// AdoptableLoadBalancer returns the LoadBalancer named for the Service to take over, read live:
// the cache may not show that the Service took it a moment ago. owned tells that it did;
// otherwise it is Adoptable, or the error a *NotAdoptable.
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

// Adoptable tells why lb cannot become desired for a Service of namespace, or nil. It must carry
// this cluster's identity, as a cluster name may be shared; a LoadBalancer cannot change its
// Network or IP families in place. A refusal does not name another namespace, which the
// Service's owner may not see.
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

// OwnershipConflict is a LoadBalancer under a name of the Service's that is another Service's.
type OwnershipConflict struct {
	LoadBalancer *networkingv1alpha1.LoadBalancer
	Owner        Owner
	// OtherID is the identity of the other cluster whose CCM manages it.
	OtherID string
}

func (e *OwnershipConflict) Error() string {
	return fmt.Sprintf("IronCore LoadBalancer %s/%s belongs to Service %s/%s (UID %q) of cluster %q",
		e.LoadBalancer.Namespace, e.LoadBalancer.Name, e.Owner.Namespace, e.Owner.Name, e.Owner.UID, e.Owner.Cluster)
}

// Problem is the conflict as the Service's event reports it, with a hint of what to do.
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

// ServiceLoadBalancer returns the Service's LoadBalancer, or nil: by UID, else by the names this
// and the reference CCM give it, where one not the cluster's is an *OwnershipConflict. With
// confirmMiss a miss is confirmed live, not to let a Service go without deleting one just made.
func (c *Client) ServiceLoadBalancer(ctx context.Context, owners Owners, service *corev1.Service, confirmMiss bool) (*networkingv1alpha1.LoadBalancer, error) {
	owned, err := c.OwnedLoadBalancers(ctx, owners, service)
	if err != nil {
		return nil, err
	}
	if len(owned) > 0 {
		return current(service, owned), nil
	}
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

// ServiceLoadBalancers returns, from the cache, the Service's LoadBalancer and those a type
// switch replaces: the ones its routing is written for.
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

// ReplacedLoadBalancers returns the Service's LoadBalancers a switch to lbType replaces.
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

// OwnedLoadBalancers returns the cached LoadBalancers of the Service: two while its type switches.
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

// current prefers a LoadBalancer of the type the Service asks for, then one not being deleted.
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

// Check returns lb if it is the Service's, else an *OwnershipConflict.
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
