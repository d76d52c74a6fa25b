package inspect

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbclass"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/targetrules"
)

// Where a LoadBalancer's targets come from (Service.TargetsFrom).
const (
	TargetsFromSelector = "selector"
	TargetsFromRouting  = "routing"
)

// inspectServices reports every Service the CCM serves (type LoadBalancer, of its load balancer
// class or class-less, see lbclass) with its LoadBalancer, and the LoadBalancers in its way.
func (in *inspection) inspectServices(ctx context.Context) ([]Service, []Conflict, error) {
	services := []Service{}
	conflicts := []Conflict{}
	for i := range in.services {
		service := &in.services[i]
		if !in.class.Serves(service) {
			continue
		}
		report, conflict, err := in.inspectService(ctx, service)
		if err != nil {
			return nil, nil, err
		}
		services = append(services, report)
		if conflict != nil {
			conflicts = append(conflicts, *conflict)
		}
	}
	return services, conflicts, nil
}

func (in *inspection) inspectService(ctx context.Context, service *corev1.Service) (Service, *Conflict, error) {
	report := Service{
		Namespace:       service.Namespace,
		Name:            service.Name,
		UID:             string(service.UID),
		ServiceIPs:      ingressIPs(service),
		LoadBalancerIPs: []string{},
		Targets:         []Target{},
		LeftOut:         []LeftOut{},
		Issues:          []Issue{},
	}
	issue := func(code, format string, args ...any) {
		report.Issues = append(report.Issues, Issue{Code: code, Detail: fmt.Sprintf(format, args...)})
	}
	wanted := networkingv1alpha1.LoadBalancerTypePublic
	internal, annotationErr := lbspec.Internal(service)
	switch {
	case annotationErr != nil:
		issue(IssueInvalidAnnotation, "%v; the CCM leaves the LoadBalancer as it is", annotationErr)
	case internal:
		wanted = networkingv1alpha1.LoadBalancerTypeInternal
	}

	lb, foreign, err := in.loadBalancerOf(ctx, service)
	if err != nil {
		return Service{}, nil, err
	}
	if foreign != nil {
		owner := ownerOf(foreign)
		issue(IssueOwnershipConflict, "IronCore LoadBalancer %s belongs to Service %s/%s (UID %q) of cluster %q; the CCM leaves it alone and the Service gets no LoadBalancer",
			foreign.Name, owner.Namespace, owner.Name, owner.UID, owner.Cluster)
		report.Type = string(wanted)
		return report, &Conflict{
			LoadBalancer:     foreign.Name,
			ServiceNamespace: service.Namespace,
			ServiceName:      service.Name,
			ServiceUID:       string(service.UID),
			Owner:            owner,
		}, nil
	}
	if lb == nil {
		issue(IssueLoadBalancerMissing, "no IronCore LoadBalancer records this Service or has its name %s; the CCM creates it when it syncs the Service", lbspec.Name(service))
		report.Type = string(wanted)
		return report, nil, nil
	}

	owner := ownerOf(lb)
	report.LoadBalancer, report.Type, report.Owner = lb.Name, string(lb.Spec.Type), &owner
	report.LoadBalancerIPs = ipStrings(lb.Status.IPs)
	if annotationErr == nil && lb.Spec.Type != wanted {
		issue(IssueTypeDiffers, "the Service asks for type %s, LoadBalancer %s is %s; the CCM replaces it, and the Service gets new addresses", wanted, lb.Name, lb.Spec.Type)
	}
	if lb.Spec.NetworkRef.Name != in.network {
		issue(IssueNetworkDiffers, "LoadBalancer %s is on Network %s, the cloud-config names %s; a LoadBalancer cannot move, so the CCM leaves it", lb.Name, lb.Spec.NetworkRef.Name, in.network)
	}
	if lb.DeletionTimestamp != nil {
		issue(IssueLoadBalancerDeleting, "LoadBalancer %s is being deleted", lb.Name)
	}
	switch {
	case len(lb.Status.IPs) == 0:
		issue(IssueNoAddresses, "IronCore has not allocated addresses to LoadBalancer %s yet", lb.Name)
	case !sameStrings(report.ServiceIPs, report.LoadBalancerIPs):
		issue(IssueServiceAddressesDiffer, "the Service's status has %s, LoadBalancer %s has %s; the service controller updates the Service on its next sync",
			joinOrNone(report.ServiceIPs), lb.Name, joinOrNone(report.LoadBalancerIPs))
	}
	if err := in.addTargets(ctx, lb, &report); err != nil {
		return Service{}, nil, err
	}
	in.addLeftOut(ctx, service, &report)
	return report, nil, nil
}

// addLeftOut applies the CCM's target rules to the Nodes and names those they keep from
// being targets of the Service's LoadBalancer, and why.
func (in *inspection) addLeftOut(ctx context.Context, service *corev1.Service, report *Service) {
	now := time.Now()
	targets := map[string]bool{}
	for _, target := range report.Targets {
		targets[target.NetworkInterface] = target.Routed
	}
	var candidates []targetrules.Candidate
	for i := range in.nodes {
		node := &in.nodes[i]
		machine, nics, notOurs, err := in.ironcore.ReadOnlyNodeMachine(ctx, node, in.network)
		foreign := targetrules.ForeignNetworkInterface(nics, in.cluster)
		switch notCandidate := in.health.NotCandidate(node); {
		case notCandidate != "":
			report.LeftOut = append(report.LeftOut, LeftOut{Node: node.Name, Reason: notCandidate})
		case err != nil:
			report.LeftOut = append(report.LeftOut, LeftOut{Node: node.Name, Reason: "cannot read its Machine: " + err.Error()})
		case notOurs != "" || (node.Spec.ProviderID != "" && machine == nil):
			// The CCM chooses only among Nodes of its IronCore namespace.
			report.LeftOut = append(report.LeftOut, LeftOut{Node: node.Name, Reason: "no IronCore Machine of this cluster is found for it"})
		case foreign != "":
			report.LeftOut = append(report.LeftOut, LeftOut{Node: node.Name, Reason: foreign})
		default:
			target := slices.ContainsFunc(nics, func(nic *networkingv1alpha1.NetworkInterface) bool { return targets[nic.Name] })
			inputs := targetrules.Inputs{Node: node, Machine: machine, NetworkInterfaces: nics, Target: target}
			candidates = append(candidates, targetrules.Candidate{Node: node.Name, Verdict: in.health.Check(inputs, now)})
		}
	}
	local := targetrules.Local(service)
	var serving map[string]bool
	if local {
		var slices []*discoveryv1.EndpointSlice
		for i := range in.endpointSlices {
			slice := &in.endpointSlices[i]
			if slice.Namespace == service.Namespace && slice.Labels[discoveryv1.LabelServiceName] == service.Name {
				slices = append(slices, slice)
			}
		}
		serving = targetrules.ServingNodes(slices)
	}
	choice := targetrules.Choose(candidates, local, serving)
	for _, node := range choice.WithoutEndpoint {
		report.LeftOut = append(report.LeftOut, LeftOut{Node: node, Reason: "no serving endpoint of the Service on it (externalTrafficPolicy Local)"})
	}
	for node, verdict := range choice.Unhealthy {
		// Failing open keeps the Nodes that may still serve; never one that cannot.
		if !choice.FailedOpen || !verdict.FailsOpen() {
			report.LeftOut = append(report.LeftOut, LeftOut{Node: node, Reason: "unhealthy: " + verdict.Reason})
		}
	}
	slices.SortFunc(report.LeftOut, func(a, b LeftOut) int { return cmp.Compare(a.Node, b.Node) })
	if choice.FailedOpen {
		report.Issues = append(report.Issues, Issue{Code: IssueTargetsFailedOpen, Detail: fmt.Sprintf(
			"every Node that could serve the Service is unhealthy, so all %d stay targets", len(choice.Targets))})
	}
	if local && choice.NoLocalEndpoints {
		report.Issues = append(report.Issues, Issue{Code: IssueNoLocalEndpoints, Detail: "no serving endpoint on a Node that can be a target; the LoadBalancer targets every healthy Node, which refuse its traffic"})
	}
}

// loadBalancerOf finds the Service's LoadBalancer as the CCM does: one recording the Service's
// UID and this cluster, else the one at a name the CCM uses for the Service. A LoadBalancer at
// such a name that belongs to someone else is returned as foreign.
func (in *inspection) loadBalancerOf(ctx context.Context, service *corev1.Service) (lb, foreign *networkingv1alpha1.LoadBalancer, err error) {
	candidates, err := in.ironcore.LoadBalancersOfService(ctx, service.UID)
	if err != nil {
		return nil, nil, err
	}
	for i := range candidates {
		if in.owns(&candidates[i], service) {
			return &candidates[i], nil, nil
		}
	}
	names := []string{lbspec.Name(service), lbspec.LegacyName(in.cluster, service)}
	if in.clusterNameFlag != "" && in.clusterNameFlag != in.cluster {
		names = append(names, lbspec.LegacyName(in.clusterNameFlag, service))
	}
	for _, name := range names {
		found, err := in.ironcore.LoadBalancer(ctx, name)
		if isNotFound(err) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		if in.owns(found, service) {
			return found, nil, nil
		}
		return nil, found, nil
	}
	return nil, nil, nil
}

// owns tells whether lb records the Service (by UID) and a cluster name the CCM answers to.
func (in *inspection) owns(lb *networkingv1alpha1.LoadBalancer, service *corev1.Service) bool {
	owner := ironcore.OwnerOf(lb)
	return owner.UID == string(service.UID) && owner.Cluster != "" && (owner.Cluster == in.cluster || owner.Cluster == in.clusterNameFlag)
}

// addTargets fills in where the LoadBalancer sends traffic: the NetworkInterfaces its selector
// matches, or the destinations of the routing the CCM wrote. What IronCore programs is the
// routing in both cases, so selected interfaces without a destination are pointed out.
func (in *inspection) addTargets(ctx context.Context, lb *networkingv1alpha1.LoadBalancer, report *Service) error {
	destinations := map[string][]string{}
	// The cache keeps no destinations; the API server's routing is what IronCore programs.
	routing, err := in.ironcore.LiveLoadBalancerRouting(ctx, lb.Name)
	switch {
	case err == nil:
		for _, destination := range routing.Destinations {
			name := ""
			if destination.TargetRef != nil {
				name = destination.TargetRef.Name
			}
			destinations[name] = append(destinations[name], destination.IP.String())
		}
	case !isNotFound(err):
		return err
	}

	if lb.Spec.NetworkInterfaceSelector == nil {
		report.TargetsFrom = TargetsFromRouting
		for name, ips := range destinations {
			report.Targets = append(report.Targets, Target{NetworkInterface: name, Node: in.nodeOfNetworkInterface(ctx, name), IPs: ips, Routed: true})
		}
		sortTargets(report.Targets)
		if len(report.Targets) == 0 {
			report.Issues = append(report.Issues, Issue{Code: IssueNoTargets, Detail: fmt.Sprintf("LoadBalancerRouting %s has no destinations: no Node the service controller passed could be made a target", lb.Name)})
		}
		return nil
	}

	report.TargetsFrom = TargetsFromSelector
	selector, err := metav1.LabelSelectorAsSelector(lb.Spec.NetworkInterfaceSelector)
	if err != nil {
		report.Issues = append(report.Issues, Issue{Code: IssueNoTargets, Detail: fmt.Sprintf("the networkInterfaceSelector of %s is invalid: %v", lb.Name, err)})
		return nil
	}
	nics, err := in.ironcore.NetworkInterfacesSelected(ctx, selector)
	if err != nil {
		return err
	}
	var unrouted []string
	for _, nic := range nics {
		if nic.Spec.NetworkRef.Name != lb.Spec.NetworkRef.Name {
			continue // IronCore routes only to interfaces on the LoadBalancer's Network
		}
		_, routed := destinations[nic.Name]
		delete(destinations, nic.Name)
		node := ""
		if nic.Spec.MachineRef != nil {
			node = in.nodeOfMachine[nic.Spec.MachineRef.Name]
		}
		report.Targets = append(report.Targets, Target{NetworkInterface: nic.Name, Node: node, IPs: ipStrings(nic.Status.IPs), Routed: routed})
		if !routed && nic.Status.State == networkingv1alpha1.NetworkInterfaceStateAvailable && len(nic.Status.IPs) > 0 {
			unrouted = append(unrouted, nic.Name)
		}
	}
	sortTargets(report.Targets)
	if len(report.Targets) == 0 {
		report.Issues = append(report.Issues, Issue{Code: IssueNoTargets, Detail: fmt.Sprintf(
			"no NetworkInterface on Network %s matches the selector %s; the CCM labels those of the Nodes the service controller passes", lb.Spec.NetworkRef.Name, selector)})
	}
	delete(destinations, "") // destinations without a target reference name no interface
	stale := slices.Sorted(maps.Keys(destinations))
	if len(unrouted) > 0 || len(stale) > 0 {
		report.Issues = append(report.Issues, Issue{Code: IssueRoutingStale, Detail: fmt.Sprintf(
			"LoadBalancerRouting %s does not follow the selector: selected but not routed: %s; routed but not selected: %s (IronCore's loadbalancer controller writes it)",
			lb.Name, joinOrNone(unrouted), joinOrNone(stale))})
	}
	return nil
}

// nodeOfNetworkInterface names the Node on the NetworkInterface's Machine, if known.
func (in *inspection) nodeOfNetworkInterface(ctx context.Context, name string) string {
	if name == "" {
		return ""
	}
	nic, err := in.ironcore.NetworkInterface(ctx, name)
	if err != nil || nic.Spec.MachineRef == nil {
		return "" // only a label for the table; the routing is what counts
	}
	return in.nodeOfMachine[nic.Spec.MachineRef.Name]
}

// findOrphans lists, of lbs, the LoadBalancers the CCM's orphan collector would remove: those this
// cluster made for a Service that is gone, was re-created, or no longer wants one. Its rule,
// repeated here because the collector reads it from an informer.
func (in *inspection) findOrphans(lbs []networkingv1alpha1.LoadBalancer) []Orphan {
	services := map[string]*corev1.Service{}
	for i := range in.services {
		services[in.services[i].Namespace+"/"+in.services[i].Name] = &in.services[i]
	}
	orphans := []Orphan{}
	for i := range lbs {
		lb := &lbs[i]
		owner := ownerOf(lb)
		if owner.Cluster != in.cluster || owner.Namespace == "" || owner.Name == "" || owner.UID == "" {
			continue
		}
		reason := ""
		service, ok := services[owner.Namespace+"/"+owner.Name]
		switch {
		case !ok:
			reason = "the Service does not exist"
		case string(service.UID) != owner.UID:
			reason = "the Service was deleted and re-created"
		case service.Spec.Type != corev1.ServiceTypeLoadBalancer:
			reason = "the Service is no longer of type LoadBalancer"
		case lbclass.Foreign(service):
			reason = "the Service has a load balancer class, so another controller serves it"
		default:
			continue
		}
		if lb.DeletionTimestamp != nil {
			reason += "; it is being deleted"
		}
		orphans = append(orphans, Orphan{LoadBalancer: lb.Name, Owner: owner, IPs: ipStrings(lb.Status.IPs), Reason: reason})
	}
	slices.SortFunc(orphans, func(a, b Orphan) int { return cmp.Compare(a.LoadBalancer, b.LoadBalancer) })
	return orphans
}

func ownerOf(lb *networkingv1alpha1.LoadBalancer) Owner {
	owner := ironcore.OwnerOf(lb)
	return Owner{Cluster: owner.Cluster, Namespace: owner.Namespace, Name: owner.Name, UID: owner.UID}
}

func ingressIPs(service *corev1.Service) []string {
	ips := []string{}
	for _, ingress := range service.Status.LoadBalancer.Ingress {
		if ingress.IP != "" {
			ips = append(ips, ingress.IP)
		} else if ingress.Hostname != "" {
			ips = append(ips, ingress.Hostname)
		}
	}
	return ips
}

func ipStrings(ips []commonv1alpha1.IP) []string {
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		out = append(out, ip.String())
	}
	return out
}

func sortTargets(targets []Target) {
	slices.SortFunc(targets, func(a, b Target) int { return cmp.Compare(a.NetworkInterface, b.NetworkInterface) })
}

func sameStrings(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

func joinOrNone(values []string) string {
	if len(values) == 0 {
		return none
	}
	return strings.Join(values, ",")
}
