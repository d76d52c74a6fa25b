package provider

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	servicecontroller "k8s.io/cloud-provider/controllers/service"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/providerid"
)

// targets finds the NetworkInterfaces that load balancers send traffic to: those on the
// cluster Network of the Nodes the service controller passes.
type targets struct {
	ironcore *ironcore.Client
	cluster  string
	network  string
	// labelsMu guards labelSyncRunning and pendingNodes. Every Service's sync passes the
	// Nodes, and the label is the same for all load balancers, so one label sync runs at a
	// time and the syncs that arrive meanwhile leave it their Nodes, newest wins, instead of
	// queueing behind its writes.
	labelsMu         sync.Mutex
	labelSyncRunning bool
	pendingNodes     []*corev1.Node
	hasPendingNodes  bool
	// nodes is the CCM's Node lister, set once informers exist. A sync's Node list may be
	// older than another's (it waited for labelsMu), so a target is only dropped when the
	// lister confirms its Node is gone or no longer eligible.
	nodes corelisters.NodeLister
}

// skippedNodes lists Nodes that could not be made targets, and why.
type skippedNodes []string

func (s skippedNodes) err() error {
	if len(s) == 0 {
		return nil
	}
	return errors.New("not load balancer targets: " + strings.Join(s, "; "))
}

// networkInterfaces returns the Nodes' NetworkInterfaces on the cluster Network, from the
// cache, sorted by name. A Node that is not initialized yet (no provider ID) is passed over
// quietly: it becomes a target when the framework passes it again with its provider ID.
func (t *targets) networkInterfaces(ctx context.Context, nodes []*corev1.Node, needIPs bool) ([]networkingv1alpha1.NetworkInterface, skippedNodes, error) {
	var nics []networkingv1alpha1.NetworkInterface
	var skipped skippedNodes
	for _, node := range nodes {
		if node.Spec.ProviderID == "" {
			klog.V(4).InfoS("Node has no provider ID yet, not a load balancer target", "node", klog.KObj(node))
			continue
		}
		nodeNICs, reason, err := t.nodeNetworkInterfaces(ctx, node, needIPs)
		if err != nil {
			return nil, nil, err
		}
		if reason != "" {
			skipped = append(skipped, fmt.Sprintf("Node %s: %s", node.Name, reason))
			continue
		}
		nics = append(nics, nodeNICs...)
	}
	slices.SortFunc(nics, func(a, b networkingv1alpha1.NetworkInterface) int { return cmp.Compare(a.Name, b.Name) })
	return nics, skipped, nil
}

// nodeNetworkInterfaces returns one Node's NetworkInterfaces on the cluster Network, or the
// reason it has none that can be used. Errors are failures to read, not facts about the Node.
func (t *targets) nodeNetworkInterfaces(ctx context.Context, node *corev1.Node, needIPs bool) ([]networkingv1alpha1.NetworkInterface, string, error) {
	id, parseErr := providerid.Parse(node.Spec.ProviderID)
	if parseErr != nil {
		// A provider ID of another cloud is a fact about the Node, not a failure to report.
		return nil, parseErr.Error(), nil //nolint:nilerr
	}
	if id.Namespace != t.ironcore.Namespace() {
		return nil, fmt.Sprintf("provider ID %s is not in IronCore namespace %s", node.Spec.ProviderID, t.ironcore.Namespace()), nil
	}
	machine, err := t.ironcore.Machine(ctx, id.Machine)
	if errors.Is(err, ironcore.ErrNotFound) {
		return nil, "its Machine does not exist", nil
	}
	if err != nil {
		return nil, "", err
	}
	var nics []networkingv1alpha1.NetworkInterface
	for _, name := range computev1alpha1.MachineNetworkInterfaceNames(machine) {
		nic, err := t.ironcore.NetworkInterface(ctx, name)
		if errors.Is(err, ironcore.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, "", err
		}
		if nic.Spec.NetworkRef.Name != t.network {
			continue
		}
		if cluster := nic.Labels[keys.LabelCluster]; cluster != "" && cluster != t.cluster {
			return nil, fmt.Sprintf("NetworkInterface %s belongs to cluster %q", nic.Name, cluster), nil
		}
		if needIPs && len(nic.Status.IPs) == 0 {
			return nil, fmt.Sprintf("NetworkInterface %s has no IPs yet", nic.Name), nil
		}
		nics = append(nics, *nic)
	}
	if len(nics) == 0 {
		return nil, fmt.Sprintf("Machine %s has no NetworkInterface on Network %s", machine.Name, t.network), nil
	}
	return nics, "", nil
}

// syncLabels labels the Nodes' NetworkInterfaces as targets of this cluster's load balancers,
// and unlabels this cluster's other targets, writing only what changes. Load balancers select
// their targets by this label, so Nodes the framework leaves out stop receiving traffic.
//
// If another sync is running, it applies these Nodes after its own, and this call only reports
// the Nodes that cannot be targets.
func (t *targets) syncLabels(ctx context.Context, nodes []*corev1.Node) (skippedNodes, error) {
	t.labelsMu.Lock()
	if t.labelSyncRunning {
		t.pendingNodes, t.hasPendingNodes = nodes, true
		t.labelsMu.Unlock()
		_, skipped, err := t.networkInterfaces(ctx, nodes, false)
		return skipped, err
	}
	t.labelSyncRunning = true
	t.labelsMu.Unlock()

	skipped, err := t.writeLabels(ctx, nodes)
	for {
		t.labelsMu.Lock()
		if !t.hasPendingNodes {
			t.labelSyncRunning = false
			t.labelsMu.Unlock()
			return skipped, err
		}
		pending := t.pendingNodes
		t.pendingNodes, t.hasPendingNodes = nil, false
		t.labelsMu.Unlock()
		if _, pendingErr := t.writeLabels(ctx, pending); pendingErr != nil {
			// Its caller has returned; the next sync of any Service retries.
			klog.ErrorS(pendingErr, "Could not update load balancer targets for a later Node list")
		}
	}
}

// writeLabels makes the labels of the NetworkInterfaces match the Nodes.
func (t *targets) writeLabels(ctx context.Context, nodes []*corev1.Node) (skippedNodes, error) {
	nics, skipped, err := t.networkInterfaces(ctx, nodes, false)
	if err != nil {
		return nil, err
	}
	wanted := map[string]bool{}
	var errs []error
	for i := range nics {
		nic := &nics[i]
		wanted[nic.Name] = true
		if nic.Labels[keys.LabelLoadBalancerTarget] == t.cluster {
			continue
		}
		if err := t.ironcore.SetLabel(ctx, nic, keys.LabelLoadBalancerTarget, t.cluster); err != nil {
			errs = append(errs, err)
			continue
		}
		klog.V(2).InfoS("NetworkInterface is now a load balancer target", "networkInterface", klog.KObj(nic))
	}
	labelled, err := t.ironcore.NetworkInterfacesLabelled(ctx, keys.LabelLoadBalancerTarget, t.cluster)
	if err != nil {
		return nil, err
	}
	var stillEligible map[string]bool
	for i := range labelled {
		nic := &labelled[i]
		if wanted[nic.Name] {
			continue
		}
		if stillEligible == nil {
			if stillEligible, err = t.eligibleMachines(); err != nil {
				return nil, err
			}
		}
		if nic.Spec.MachineRef != nil && stillEligible[nic.Spec.MachineRef.Name] {
			klog.V(4).InfoS("Keeping a load balancer target that a stale Node list left out", "networkInterface", klog.KObj(nic))
			continue
		}
		if err := t.ironcore.RemoveLabel(ctx, nic, keys.LabelLoadBalancerTarget); err != nil {
			errs = append(errs, err)
			continue
		}
		klog.V(2).InfoS("NetworkInterface is no longer a load balancer target", "networkInterface", klog.KObj(nic))
	}
	return skipped, errors.Join(errs...)
}

// eligibleMachines names the Machines of the Nodes that the service controller currently
// passes to load balancers: not being deleted, not excluded by label, not tainted for deletion
// by the cluster autoscaler (its stable node set predicates, k8s.io/cloud-provider v0.35).
// Without a lister every Node is taken as gone, so the caller's list decides alone.
func (t *targets) eligibleMachines() (map[string]bool, error) {
	eligible := map[string]bool{}
	if t.nodes == nil {
		return eligible, nil
	}
	nodes, err := t.nodes.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list Nodes: %w", err)
	}
	for _, node := range nodes {
		id, err := providerid.Parse(node.Spec.ProviderID)
		if err != nil || id.Namespace != t.ironcore.Namespace() || !node.DeletionTimestamp.IsZero() {
			continue
		}
		if excludedFromLoadBalancers(node) {
			continue
		}
		if slices.ContainsFunc(node.Spec.Taints, func(taint corev1.Taint) bool { return taint.Key == servicecontroller.ToBeDeletedTaint }) {
			continue
		}
		eligible[id.Machine] = true
	}
	return eligible, nil
}

// excludedFromLoadBalancers reads the exclusion label as the service controller does: any
// value but a false boolean excludes.
func excludedFromLoadBalancers(node *corev1.Node) bool {
	value, ok := node.Labels[corev1.LabelNodeExcludeBalancers]
	if !ok {
		return false
	}
	excluded, err := strconv.ParseBool(value)
	return err != nil || excluded
}

// destinations lists a LoadBalancerRouting destination for every IP of the Nodes'
// NetworkInterfaces, in a stable order.
func (t *targets) destinations(ctx context.Context, nodes []*corev1.Node) ([]networkingv1alpha1.LoadBalancerDestination, skippedNodes, error) {
	nics, skipped, err := t.networkInterfaces(ctx, nodes, true)
	if err != nil {
		return nil, nil, err
	}
	destinations := []networkingv1alpha1.LoadBalancerDestination{}
	for _, nic := range nics {
		for _, ip := range nic.Status.IPs {
			destinations = append(destinations, networkingv1alpha1.LoadBalancerDestination{
				IP:        ip,
				TargetRef: &networkingv1alpha1.LoadBalancerTargetRef{UID: nic.UID, Name: nic.Name, ProviderID: nic.Spec.ProviderID},
			})
		}
	}
	return destinations, skipped, nil
}
