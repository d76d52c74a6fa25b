// Package lbspec is the IronCore LoadBalancer a Service asks for, and the checks of an existing
// one against it. It neither reads nor writes IronCore, so that it can be tested and fuzzed
// alone; package provider does, and records the Problems found here on the Service.
package lbspec

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	ipamv1alpha1 "github.com/ironcore-dev/ironcore/api/ipam/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/clusterid"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/targetrules"
)

// Settings are the cloud settings IronCore LoadBalancers are built from.
type Settings struct {
	Cluster string
	// Aliases are the cluster's earlier names; LoadBalancers recording one are adopted.
	Aliases []string
	// ClusterID is the cluster's identity, written on LoadBalancers once it is known.
	ClusterID *clusterid.ID
	Network   string
	// InternalPrefixes are the parent Prefixes of internal load balancer addresses, by family.
	InternalPrefixes map[corev1.IPFamily]string
	UseNICSelector   bool
}

// Name is the Service's UID without dashes, the reference CCM's name for its LoadBalancer.
func Name(service *corev1.Service) string {
	return strings.ReplaceAll(string(service.UID), "-", "")
}

// LegacyName is the name older reference CCMs gave a Service's LoadBalancer.
func LegacyName(cluster string, service *corev1.Service) string {
	uidPrefix, _, _ := strings.Cut(string(service.UID), "-")
	return cluster + "-" + service.Name + "-" + uidPrefix
}

// Desired returns the IronCore LoadBalancer a Service asks for, or a *Problem naming what in
// the Service cannot be served.
func Desired(service *corev1.Service, settings Settings) (*networkingv1alpha1.LoadBalancer, error) {
	internal, err := Internal(service)
	if err != nil {
		return nil, err
	}
	families := ipFamilies(service)
	ports, err := loadBalancerPorts(service)
	if err != nil {
		return nil, err
	}
	lb := &networkingv1alpha1.LoadBalancer{
		ObjectMeta: metav1.ObjectMeta{
			Name:        Name(service),
			Labels:      ownerLabels(settings, service),
			Annotations: ownerAnnotations(settings.Cluster, service),
		},
		Spec: networkingv1alpha1.LoadBalancerSpec{
			Type:       networkingv1alpha1.LoadBalancerTypePublic,
			IPFamilies: slices.Clone(families),
			NetworkRef: corev1.LocalObjectReference{Name: settings.Network},
			Ports:      ports,
		},
	}
	if internal {
		requested, err := requestedIPs(service, families)
		if err != nil {
			return nil, err
		}
		prefixes, err := addressPrefixes(service, settings)
		if err != nil {
			return nil, err
		}
		lb.Spec.Type = networkingv1alpha1.LoadBalancerTypeInternal
		lb.Spec.IPs, err = internalIPs(families, requested, prefixes)
		if err != nil {
			return nil, err
		}
	} else if _, err := requestedIPs(service, families); err != nil {
		// A Public LoadBalancer cannot ask IronCore for an address: the requested ones only
		// take over a LoadBalancer retained with them (WantedAdoption).
		return nil, err
	}
	if UsesSelector(service, settings) {
		lb.Spec.NetworkInterfaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{
			keys.LabelCluster:            settings.Cluster,
			keys.LabelLoadBalancerTarget: settings.Cluster,
		}}
	}
	return lb, nil
}

// Adoption is the retained LoadBalancer a Service asks to take over: by Name, or else the one
// holding exactly Addresses. Strict means no new LoadBalancer instead: IronCore cannot give a new
// Public one an address. spec.loadBalancerIP alone, which the reference CCM ignored on Public
// Services, and an Internal Service's request are not strict.
type Adoption struct {
	Name      string
	Addresses []netip.Addr
	Strict    bool
}

// WantedAdoption returns what the Service asks to take over, if anything.
func WantedAdoption(service *corev1.Service, desired *networkingv1alpha1.LoadBalancer) (Adoption, bool) {
	if name, named := service.Annotations[keys.AnnotationLoadBalancerName]; named {
		return Adoption{Name: name, Strict: true}, true
	}
	requested, err := requestedIPs(service, desired.Spec.IPFamilies)
	if err != nil || len(requested) == 0 {
		return Adoption{}, false
	}
	adoption := Adoption{Strict: desired.Spec.Type == networkingv1alpha1.LoadBalancerTypePublic &&
		strings.TrimSpace(service.Annotations[keys.AnnotationLoadBalancerIPs]) != ""}
	for _, family := range desired.Spec.IPFamilies {
		if addr, ok := requested[family]; ok {
			adoption.Addresses = append(adoption.Addresses, addr)
		}
	}
	return adoption, true
}

// ipFamilies are the Service's IP families; IPv4 if the API server has not defaulted them.
func ipFamilies(service *corev1.Service) []corev1.IPFamily {
	if len(service.Spec.IPFamilies) == 0 {
		return []corev1.IPFamily{corev1.IPv4Protocol}
	}
	return service.Spec.IPFamilies
}

// Internal reads the internal annotation. Only "true" and "false" are accepted: the reference
// CCM treated anything but "true" as Public, so guessing at other spellings could turn an
// existing Public LoadBalancer Internal and change its address.
func Internal(service *corev1.Service) (bool, error) {
	value, ok := service.Annotations[keys.AnnotationInternalLoadBalancer]
	switch {
	case !ok || value == "false":
		return false, nil
	case value == "true":
		return true, nil
	default:
		return false, &Problem{Reason: ReasonInvalidAnnotation, Message: fmt.Sprintf(
			"annotation %s must be \"true\" or \"false\", not %q", keys.AnnotationInternalLoadBalancer, value)}
	}
}

// Retain reads the retain annotation: "true" keeps the Service's LoadBalancer when the Service
// is deleted or stops wanting one. A value other than "true" or "false" is a Problem, and the
// LoadBalancer is kept all the same: a misspelt wish to keep an address must not cost it.
func Retain(service *corev1.Service) (bool, error) {
	switch value, ok := service.Annotations[keys.AnnotationRetainLoadBalancer]; {
	case !ok || value == "false":
		return false, nil
	case value == "true":
		return true, nil
	default:
		return true, &Problem{Reason: ReasonInvalidAnnotation, Message: fmt.Sprintf(
			"annotation %s must be \"true\" or \"false\", not %q; the LoadBalancer is retained as if it were \"true\"", keys.AnnotationRetainLoadBalancer, value)}
	}
}

// UsesSelector reports whether the Service's LoadBalancer selects its targets by label; a Local
// Service's targets are its own, so the CCM always writes its routing.
func UsesSelector(service *corev1.Service, settings Settings) bool {
	return settings.UseNICSelector && !targetrules.Local(service)
}

// requestedIPs collects the addresses asked for, at most one per IP family of the Service.
func requestedIPs(service *corev1.Service, families []corev1.IPFamily) (map[corev1.IPFamily]netip.Addr, error) {
	type request struct{ field, value string }
	var requests []request
	if ip := strings.TrimSpace(service.Spec.LoadBalancerIP); ip != "" {
		requests = append(requests, request{"spec.loadBalancerIP", ip})
	}
	if list, ok := service.Annotations[keys.AnnotationLoadBalancerIPs]; ok {
		for _, ip := range strings.Split(list, ",") {
			if ip = strings.TrimSpace(ip); ip != "" {
				requests = append(requests, request{"annotation " + keys.AnnotationLoadBalancerIPs, ip})
			}
		}
	}
	requested := map[corev1.IPFamily]netip.Addr{}
	fieldOf := map[corev1.IPFamily]string{}
	for _, r := range requests {
		addr, err := netip.ParseAddr(r.value)
		if err != nil || addr.Zone() != "" {
			return nil, &Problem{Reason: ReasonInvalidLoadBalancerIP, Message: fmt.Sprintf("requested load balancer address %q (%s) is not an IP address", r.value, r.field)}
		}
		addr = addr.Unmap()
		family := familyOf(addr)
		if !slices.Contains(families, family) {
			return nil, &Problem{Reason: ReasonInvalidLoadBalancerIP, Message: fmt.Sprintf(
				"requested load balancer address %s (%s) is %s, but the Service's IP families are %v", addr, r.field, family, families)}
		}
		if previous, ok := requested[family]; ok && previous != addr {
			return nil, &Problem{Reason: ReasonInvalidLoadBalancerIP, Message: fmt.Sprintf(
				"requested load balancer addresses %s (%s) and %s (%s) are both %s; give at most one per family", previous, fieldOf[family], addr, r.field, family)}
		}
		requested[family], fieldOf[family] = addr, r.field
	}
	return requested, nil
}

// internalIPs allocates each family's address from its Prefix; a requested one as an exact child
// Prefix, so that IPAM refuses an address already held. The template is spelled out as IronCore
// would default it, so that an unchanged Service compares equal and causes no write.
func internalIPs(families []corev1.IPFamily, requested map[corev1.IPFamily]netip.Addr, prefixes map[corev1.IPFamily]string) ([]networkingv1alpha1.IPSource, error) {
	var sources []networkingv1alpha1.IPSource
	for _, family := range families {
		parent := prefixes[family]
		addr, wanted := requested[family]
		if parent == "" {
			key := "prefixName"
			if family == corev1.IPv6Protocol {
				key = "ipv6PrefixName"
			}
			what := "an " + string(family) + " address"
			if wanted {
				what = "its requested address " + addr.String()
			}
			return nil, &Problem{Reason: ReasonInternalPrefixMissing, Message: fmt.Sprintf(
				"an Internal LoadBalancer needs %s allocated from a Prefix, but neither the Service nor the cloud-config names one for %s (%s); "+
					"name a Prefix given to the namespace with %s, or ask the cluster operator to set %s",
				what, family, key, keys.AnnotationLoadBalancerPrefix, key)}
		}
		spec := ipamv1alpha1.PrefixSpec{
			IPFamily:     family,
			PrefixLength: hostPrefixLength(family),
			ParentRef:    &corev1.LocalObjectReference{Name: parent},
		}
		if wanted {
			spec.Prefix = commonv1alpha1.NewIPPrefix(netip.PrefixFrom(addr, int(hostPrefixLength(family))))
		}
		sources = append(sources, networkingv1alpha1.IPSource{Ephemeral: &networkingv1alpha1.EphemeralPrefixSource{
			PrefixTemplate: &ipamv1alpha1.PrefixTemplateSpec{Spec: spec},
		}})
	}
	return sources, nil
}

// RequestedAddresses are the exact addresses desired asks IPAM for, by parent Prefix.
func RequestedAddresses(desired *networkingv1alpha1.LoadBalancer) map[string]netip.Addr {
	requested := map[string]netip.Addr{}
	for _, source := range desired.Spec.IPs {
		if source.Ephemeral == nil || source.Ephemeral.PrefixTemplate == nil {
			continue
		}
		spec := source.Ephemeral.PrefixTemplate.Spec
		if spec.Prefix != nil && spec.ParentRef != nil {
			requested[spec.ParentRef.Name] = spec.Prefix.Addr()
		}
	}
	return requested
}

// loadBalancerPorts maps the Service's ports and checks them: IronCore's validation misses some
// (it accepts a lone port 70000).
func loadBalancerPorts(service *corev1.Service) ([]networkingv1alpha1.LoadBalancerPort, error) {
	var errs []error
	ports := make([]networkingv1alpha1.LoadBalancerPort, 0, len(service.Spec.Ports))
	for i, port := range service.Spec.Ports {
		protocol := port.Protocol
		if protocol == "" {
			protocol = corev1.ProtocolTCP
		}
		switch {
		case protocol != corev1.ProtocolTCP && protocol != corev1.ProtocolUDP && protocol != corev1.ProtocolSCTP:
			errs = append(errs, fmt.Errorf("spec.ports[%d] (%q): protocol %s is not supported (TCP, UDP or SCTP)", i, port.Name, protocol))
		case port.Port < 1 || port.Port > 65535:
			errs = append(errs, fmt.Errorf("spec.ports[%d] (%q): %d is not a port number (1-65535)", i, port.Name, port.Port))
		default:
			ports = append(ports, networkingv1alpha1.LoadBalancerPort{Protocol: &protocol, Port: port.Port})
		}
	}
	if len(errs) > 0 {
		return nil, &Problem{Reason: ReasonUnsupportedPort, Message: errors.Join(errs...).Error()}
	}
	return ports, nil
}

// ownerLabels record the Service and cluster, the wish to retain, and the cluster's identity,
// which the orphan collector requires before it deletes; until the identity is known the label
// is left out, and NeedsApply has it added later.
func ownerLabels(settings Settings, service *corev1.Service) map[string]string {
	labels := map[string]string{
		keys.LabelClusterName:      settings.Cluster,
		keys.LabelServiceNamespace: service.Namespace,
		keys.LabelServiceName:      service.Name,
		keys.LabelServiceUID:       string(service.UID),
	}
	if id, known := settings.ClusterID.Known(); known {
		labels[keys.LabelClusterID] = id
	}
	if retain, _ := Retain(service); retain {
		labels[keys.LabelRetainRequested] = "true"
	}
	return labels
}

func ownerAnnotations(cluster string, service *corev1.Service) map[string]string {
	return map[string]string{
		keys.AnnotationClusterName:      cluster,
		keys.AnnotationServiceNamespace: service.Namespace,
		keys.AnnotationServiceName:      service.Name,
		keys.AnnotationServiceUID:       string(service.UID),
	}
}

func familyOf(addr netip.Addr) corev1.IPFamily {
	if addr.Is4() {
		return corev1.IPv4Protocol
	}
	return corev1.IPv6Protocol
}

func hostPrefixLength(family corev1.IPFamily) int32 {
	if family == corev1.IPv6Protocol {
		return 128
	}
	return 32
}
