package ironcore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	networkingv1alpha1apply "github.com/ironcore-dev/ironcore/client-go/applyconfigurations/networking/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
)

// FieldOwner is the server-side apply field manager: the reference CCM's, so that applying over
// its LoadBalancers takes over their fields instead of conflicting.
const FieldOwner = "cloud-provider.ironcore.dev/loadbalancer"

// applyOptions take over fields from other managers: only this CCM is meant to set them.
func applyOptions() metav1.ApplyOptions {
	return metav1.ApplyOptions{FieldManager: FieldOwner, Force: true}
}

// Owner is who an IronCore LoadBalancer says it was made for.
type Owner struct {
	Cluster, Namespace, Name, UID string
}

// OwnerOf reads a LoadBalancer's owner from our labels, else the reference CCM's annotations.
func OwnerOf(lb *networkingv1alpha1.LoadBalancer) Owner {
	read := func(label, annotation string) string {
		if value := lb.Labels[label]; value != "" {
			return value
		}
		return lb.Annotations[annotation]
	}
	return Owner{
		Cluster:   read(keys.LabelClusterName, keys.AnnotationClusterName),
		Namespace: read(keys.LabelServiceNamespace, keys.AnnotationServiceNamespace),
		Name:      read(keys.LabelServiceName, keys.AnnotationServiceName),
		UID:       read(keys.LabelServiceUID, keys.AnnotationServiceUID),
	}
}

func serviceUIDsOf(obj client.Object) []string {
	var uids []string
	if uid := obj.GetAnnotations()[keys.AnnotationServiceUID]; uid != "" {
		uids = append(uids, uid)
	}
	if uid := obj.GetLabels()[keys.LabelServiceUID]; uid != "" && (len(uids) == 0 || uids[0] != uid) {
		uids = append(uids, uid)
	}
	return uids
}

// LoadBalancersOfService returns the cached LoadBalancers that record uid as their Service.
func (c *Client) LoadBalancersOfService(ctx context.Context, uid types.UID) ([]networkingv1alpha1.LoadBalancer, error) {
	list := &networkingv1alpha1.LoadBalancerList{}
	if err := c.cache.List(ctx, list, client.InNamespace(c.namespace), client.MatchingFields{indexLoadBalancerServiceUID: string(uid)}); err != nil {
		return nil, fmt.Errorf("list LoadBalancers of Service %s: %w", uid, err)
	}
	c.markDeleted(list.Items)
	return list.Items, nil
}

// LoadBalancers returns every cached LoadBalancer of the namespace.
func (c *Client) LoadBalancers(ctx context.Context) ([]networkingv1alpha1.LoadBalancer, error) {
	list := &networkingv1alpha1.LoadBalancerList{}
	if err := c.cache.List(ctx, list, client.InNamespace(c.namespace)); err != nil {
		return nil, fmt.Errorf("list LoadBalancers: %w", err)
	}
	c.markDeleted(list.Items)
	return list.Items, nil
}

// markDeleted shows the LoadBalancers this client deleted as being deleted, however far
// behind the cache is (see deletedLoadBalancers).
func (c *Client) markDeleted(lbs []networkingv1alpha1.LoadBalancer) {
	for i := range lbs {
		c.deletedLBs.mark(&lbs[i])
	}
}

// LoadBalancer returns the named LoadBalancer from the cache; one this client deleted shows
// as being deleted.
func (c *Client) LoadBalancer(ctx context.Context, name string) (*networkingv1alpha1.LoadBalancer, error) {
	lb := &networkingv1alpha1.LoadBalancer{}
	if err := c.getCached(ctx, "LoadBalancer", c.namespace, name, lb); err != nil {
		return nil, err
	}
	c.deletedLBs.mark(lb)
	return lb, nil
}

// LiveLoadBalancer reads the named LoadBalancer from the API server.
func (c *Client) LiveLoadBalancer(ctx context.Context, name string) (*networkingv1alpha1.LoadBalancer, error) {
	ctx = urgent(ctx)
	lb := &networkingv1alpha1.LoadBalancer{}
	if err := c.api.Get(ctx, client.ObjectKey{Namespace: c.namespace, Name: name}, lb); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("LoadBalancer %s/%s: %w", c.namespace, name, ErrNotFound)
		}
		return nil, fmt.Errorf("read LoadBalancer %s/%s: %w", c.namespace, name, err)
	}
	return lb, nil
}

// ApplyLoadBalancer server-side applies lb's labels, annotations and spec.
func (c *Client) ApplyLoadBalancer(ctx context.Context, lb *networkingv1alpha1.LoadBalancer) (*networkingv1alpha1.LoadBalancer, error) {
	ctx = urgent(ctx)
	desired := lb.DeepCopy()
	desired.Namespace = c.namespace
	desired.TypeMeta = metav1.TypeMeta{APIVersion: networkingv1alpha1.SchemeGroupVersion.String(), Kind: "LoadBalancer"}
	apply := &networkingv1alpha1apply.LoadBalancerApplyConfiguration{}
	if err := convert(desired, apply); err != nil {
		return nil, err
	}
	apply.Status = nil
	applied, err := c.applier.NetworkingV1alpha1().LoadBalancers(c.namespace).Apply(ctx, apply, applyOptions())
	if err != nil {
		return nil, fmt.Errorf("apply LoadBalancer %s/%s: %w", c.namespace, lb.Name, err)
	}
	return applied, nil
}

// AnnotateLoadBalancer sets one annotation of lb with a merge patch of that key, for keys only
// this CCM writes.
func (c *Client) AnnotateLoadBalancer(ctx context.Context, lb *networkingv1alpha1.LoadBalancer, key, value string) (*networkingv1alpha1.LoadBalancer, error) {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}})
	if err != nil {
		return nil, err
	}
	patched := lb.DeepCopy()
	if err := c.api.Patch(ctx, patched, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return nil, fmt.Errorf("annotate LoadBalancer %s/%s: %w", c.namespace, lb.Name, err)
	}
	return patched, nil
}

// RetainLoadBalancer marks lb retained after its Service from (namespace/name): it records no
// Service, so no sync finds it, and selects no targets, so the routing is the CCM's to empty. It
// records the cluster's identity, so that only this cluster may take it over. The write is made
// on the version of lb read only.
func (c *Client) RetainLoadBalancer(ctx context.Context, lb *networkingv1alpha1.LoadBalancer, from string, at time.Time, clusterID string) (*networkingv1alpha1.LoadBalancer, error) {
	labels := map[string]any{keys.LabelRetained: "true", keys.LabelRetainRequested: nil}
	if clusterID != "" {
		labels[keys.LabelClusterID] = clusterID
	}
	annotations := map[string]any{keys.AnnotationRetainedFrom: from, keys.AnnotationRetainedAt: at.UTC().Format(time.RFC3339), keys.AnnotationRetainedFor: nil}
	for _, key := range []string{keys.LabelServiceName, keys.LabelServiceNamespace, keys.LabelServiceUID} {
		labels[key] = nil
	}
	for _, key := range []string{keys.AnnotationServiceName, keys.AnnotationServiceNamespace, keys.AnnotationServiceUID} {
		annotations[key] = nil
	}
	spec := map[string]any{"networkInterfaceSelector": nil}
	return c.patchLoadBalancerVersion(ctx, "retain", lb, labels, annotations, spec)
}

// AdoptRetainedLoadBalancer gives retained lb to a new Service, on the version read only: of two
// Services asking for it, exactly one gets it.
func (c *Client) AdoptRetainedLoadBalancer(ctx context.Context, lb *networkingv1alpha1.LoadBalancer, ownerLabels, ownerAnnotations map[string]string) (*networkingv1alpha1.LoadBalancer, error) {
	labels := map[string]any{keys.LabelRetained: nil}
	for key, value := range ownerLabels {
		labels[key] = value
	}
	annotations := map[string]any{keys.AnnotationRetainedFrom: nil, keys.AnnotationRetainedAt: nil, keys.AnnotationRetainedFor: nil}
	for key, value := range ownerAnnotations {
		annotations[key] = value
	}
	return c.patchLoadBalancerVersion(ctx, "adopt", lb, labels, annotations, nil)
}

// patchLoadBalancerVersion merge-patches lb (a nil value removes a key) on the version read
// only: the API server refuses it with a conflict if lb changed since.
func (c *Client) patchLoadBalancerVersion(ctx context.Context, verb string, lb *networkingv1alpha1.LoadBalancer, labels, annotations, spec map[string]any) (*networkingv1alpha1.LoadBalancer, error) {
	body := map[string]any{"metadata": map[string]any{"resourceVersion": lb.ResourceVersion, "labels": labels, "annotations": annotations}}
	if spec != nil {
		body["spec"] = spec
	}
	patch, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	patched := lb.DeepCopy()
	if err := c.api.Patch(urgent(ctx), patched, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return nil, fmt.Errorf("%s LoadBalancer %s/%s: %w", verb, c.namespace, lb.Name, err)
	}
	return patched, nil
}

// OwnedBy tells whether obj, a LoadBalancerRouting say, names lb among its owners.
func OwnedBy(obj metav1.Object, lb *networkingv1alpha1.LoadBalancer) bool {
	for _, ref := range obj.GetOwnerReferences() {
		if ref.UID == lb.UID {
			return true
		}
	}
	return false
}

// Retained tells whether lb was retained after its Service (RetainLoadBalancer).
func Retained(lb *networkingv1alpha1.LoadBalancer) bool {
	return lb.Labels[keys.LabelRetained] == "true"
}

// RetainedAt returns when lb was retained, if it is and records a readable time.
func RetainedAt(lb *networkingv1alpha1.LoadBalancer) (time.Time, bool) {
	if !Retained(lb) {
		return time.Time{}, false
	}
	at, err := time.Parse(time.RFC3339, lb.Annotations[keys.AnnotationRetainedAt])
	return at, err == nil
}

// ReleaseRetainedLoadBalancer deletes retained lb on the version read only, so that one a Service
// took over since is refused with a conflict.
func (c *Client) ReleaseRetainedLoadBalancer(ctx context.Context, lb *networkingv1alpha1.LoadBalancer) error {
	uid, version := lb.UID, lb.ResourceVersion
	return c.deletedLBs.deleting(uid, func() error {
		if err := c.api.Delete(urgent(ctx), lb.DeepCopy(), client.Preconditions{UID: &uid, ResourceVersion: &version}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("release LoadBalancer %s/%s: %w", c.namespace, lb.Name, err)
		}
		return nil
	})
}

// DeleteLoadBalancer deletes lb, not a namesake created since; one already gone is no error.
func (c *Client) DeleteLoadBalancer(ctx context.Context, lb *networkingv1alpha1.LoadBalancer) error {
	return c.deletedLBs.deleting(lb.UID, func() error { return c.deleteExactly(urgent(ctx), "LoadBalancer", lb) })
}

// LoadBalancerRouting returns the named LoadBalancerRouting from the cache, or from the API
// server after ReadRoutingsLive.
func (c *Client) LoadBalancerRouting(ctx context.Context, name string) (*networkingv1alpha1.LoadBalancerRouting, error) {
	routing := &networkingv1alpha1.LoadBalancerRouting{}
	if !c.routingsLive {
		if err := c.getCached(ctx, "LoadBalancerRouting", c.namespace, name, routing); err != nil {
			return nil, err
		}
		return routing, nil
	}
	return c.LiveLoadBalancerRouting(ctx, name)
}

// RoutingsLive tells whether LoadBalancerRouting reads go to the API server (ReadRoutingsLive).
func (c *Client) RoutingsLive() bool { return c.routingsLive }

// LiveLoadBalancerRouting reads the named LoadBalancerRouting from the API server.
func (c *Client) LiveLoadBalancerRouting(ctx context.Context, name string) (*networkingv1alpha1.LoadBalancerRouting, error) {
	routing := &networkingv1alpha1.LoadBalancerRouting{}
	if err := c.api.Get(urgent(ctx), client.ObjectKey{Namespace: c.namespace, Name: name}, routing); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("LoadBalancerRouting %s/%s: %w", c.namespace, name, ErrNotFound)
		}
		return nil, fmt.Errorf("read LoadBalancerRouting %s/%s: %w", c.namespace, name, err)
	}
	return routing, nil
}

// ApplyLoadBalancerRouting server-side applies routing and returns the resource version it left.
// Only metadata comes back: a routing at 1,000 Nodes is about 140 KB decoded, and copies of it
// in flight were the largest part of a burst's heap.
func (c *Client) ApplyLoadBalancerRouting(ctx context.Context, routing *networkingv1alpha1.LoadBalancerRouting) (string, error) {
	desired := *routing // shallow: the destinations are only read
	desired.Namespace = c.namespace
	desired.TypeMeta = metav1.TypeMeta{APIVersion: networkingv1alpha1.SchemeGroupVersion.String(), Kind: "LoadBalancerRouting"}
	body, err := json.Marshal(&desired)
	if err != nil {
		return "", fmt.Errorf("apply LoadBalancerRouting %s/%s: %w", c.namespace, routing.Name, err)
	}
	written := &metav1.PartialObjectMetadata{}
	written.SetGroupVersionKind(networkingv1alpha1.SchemeGroupVersion.WithKind("LoadBalancerRouting"))
	written.Namespace, written.Name = c.namespace, routing.Name
	if err := c.api.Patch(urgent(ctx), written, client.RawPatch(types.ApplyPatchType, body), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return "", fmt.Errorf("apply LoadBalancerRouting %s/%s: %w", c.namespace, routing.Name, err)
	}
	return written.ResourceVersion, nil
}

// DeleteLoadBalancerRouting deletes routing, and only routing.
func (c *Client) DeleteLoadBalancerRouting(ctx context.Context, routing *networkingv1alpha1.LoadBalancerRouting) error {
	return c.deleteExactly(urgent(ctx), "LoadBalancerRouting", routing)
}

// Network returns the named Network from the cache.
func (c *Client) Network(ctx context.Context, name string) (*networkingv1alpha1.Network, error) {
	network := &networkingv1alpha1.Network{}
	if err := c.getCached(ctx, "Network", c.namespace, name, network); err != nil {
		return nil, err
	}
	return network, nil
}

func (c *Client) deleteExactly(ctx context.Context, kind string, obj client.Object) error {
	uid := obj.GetUID()
	err := c.api.Delete(ctx, obj, client.Preconditions{UID: &uid})
	switch {
	case err == nil, apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err):
		// A conflict may have another cause than the precondition; taken for done, it would
		// drop the Service's finalizer with its LoadBalancer still there.
		current, ok := obj.DeepCopyObject().(client.Object)
		if !ok {
			return fmt.Errorf("delete %s %s/%s: %w", kind, obj.GetNamespace(), obj.GetName(), err)
		}
		getErr := c.api.Get(ctx, client.ObjectKeyFromObject(obj), current)
		switch {
		case apierrors.IsNotFound(getErr):
			return nil
		case getErr == nil && current.GetUID() != uid:
			return nil
		case getErr == nil && current.GetDeletionTimestamp() != nil:
			return nil
		}
		return fmt.Errorf("delete %s %s/%s: %w", kind, obj.GetNamespace(), obj.GetName(), errors.Join(err, getErr))
	default:
		return fmt.Errorf("delete %s %s/%s: %w", kind, obj.GetNamespace(), obj.GetName(), err)
	}
}

// convert copies between an API type and its apply configuration, which share a JSON form.
func convert(from, to any) error {
	data, err := json.Marshal(from)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, to)
}
