package lbtargets

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/targetrules"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/targetsapi"
)

// Resolving Nodes: from a Node to its Machine and NetworkInterfaces, and the candidates the
// target rules choose from.

// resolvedNode is a Node with its Machine (nil if gone) and cluster Network NetworkInterfaces,
// which are the cache's own objects: read them, never change them.
type resolvedNode struct {
	node    *corev1.Node
	machine *computev1alpha1.Machine
	nics    []*networkingv1alpha1.NetworkInterface
}

// serving are the NetworkInterfaces traffic can be sent to.
func (r resolvedNode) serving() []*networkingv1alpha1.NetworkInterface {
	return targetrules.ServingNetworkInterfaces(r.machine, r.nics)
}

// resolve finds the Nodes' Machines and NetworkInterfaces in the synced IronCore cache, where a
// Machine it does not hold is gone. A Node that is not an IronCore Machine of this namespace is
// passed over quietly, as failing every Service's sync over it would help no one; a
// NetworkInterface of another cluster is reported as skipped.
func (t *Controller) resolve(ctx context.Context, nodes []*corev1.Node) ([]resolvedNode, targetsapi.Skipped, error) {
	resolved := make([]resolvedNode, 0, len(nodes))
	var skipped targetsapi.Skipped
	for _, node := range nodes {
		r, reason, quiet, err := t.resolveNode(ctx, node)
		switch {
		case err != nil:
			return nil, nil, err
		case quiet:
			t.logLeftOut(node, reason)
		case reason != "":
			skipped = append(skipped, fmt.Sprintf("Node %s: %s", node.Name, reason))
		default:
			resolved = append(resolved, r)
		}
	}
	return resolved, skipped, nil
}

// resolveNode resolves one Node, or returns the reason it cannot be a target at all; quiet
// reasons are facts about the Node that no retry changes. Errors are failures to read, not
// facts about the Node.
func (t *Controller) resolveNode(ctx context.Context, node *corev1.Node) (r resolvedNode, reason string, quiet bool, err error) {
	r.node = node
	var notOurs string
	if r.machine, r.nics, notOurs, err = t.ironcore.ReadOnlyNodeMachine(ctx, node, t.network); err != nil || notOurs != "" {
		// A provider ID of another cloud or namespace is a fact about the Node, not a failure to report.
		return r, notOurs, notOurs != "", err
	}
	return r, targetrules.ForeignNetworkInterface(r.nics, t.cluster), false, nil
}

// servingInterfacesOf lists the NetworkInterfaces traffic can be sent to of the resolved
// Nodes, sorted by name.
func servingInterfacesOf(resolved []resolvedNode) []*networkingv1alpha1.NetworkInterface {
	var nics []*networkingv1alpha1.NetworkInterface
	for _, r := range resolved {
		nics = append(nics, r.serving()...)
	}
	slices.SortFunc(nics, func(a, b *networkingv1alpha1.NetworkInterface) int { return cmp.Compare(a.Name, b.Name) })
	return nics
}

// logLeftOut logs once per Node and reason that the Node is not a load balancer target.
func (t *Controller) logLeftOut(node *corev1.Node, reason string) {
	if previous, loaded := t.leftOut.Swap(node.Name, reason); loaded && previous == reason {
		return
	}
	klog.InfoS("Node is not a load balancer target", "node", klog.KObj(node), "reason", reason)
	// A sync under way may log a Node whose deletion was handled meanwhile: the lister, updated
	// before that, no longer shows it.
	if _, err := t.listers.nodes.Get(node.Name); apierrors.IsNotFound(err) {
		t.leftOut.Delete(node.Name)
	}
}

// candidates returns the Nodes the rules choose from, from the lister the service controller's
// lists come from, so that a Node deleted or excluded since an older list is not brought back.
func (t *Controller) candidates() ([]*corev1.Node, error) {
	known, err := t.listers.nodes.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list Nodes: %w", err)
	}
	result := make([]*corev1.Node, 0, len(known))
	for _, node := range known {
		if t.health.NotCandidate(node) != "" {
			continue
		}
		result = append(result, node)
	}
	return result, nil
}
