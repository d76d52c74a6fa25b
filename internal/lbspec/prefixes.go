package lbspec

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
)

// ReasonPrefixIgnored notes a Prefix annotation that does not apply to the Service.
const ReasonPrefixIgnored = "LoadBalancerPrefixIgnored"

// prefixAnnotations are the annotations naming a Service's own Prefix, by IP family.
var prefixAnnotations = map[corev1.IPFamily]string{
	corev1.IPv4Protocol: keys.AnnotationLoadBalancerPrefix,
	corev1.IPv6Protocol: keys.AnnotationLoadBalancerIPv6Prefix,
}

// annotatedPrefixes reads the Prefixes the Service names for its addresses, by IP family.
func annotatedPrefixes(service *corev1.Service) (map[corev1.IPFamily]string, error) {
	prefixes := map[corev1.IPFamily]string{}
	for _, family := range []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol} {
		key := prefixAnnotations[family]
		name, ok := service.Annotations[key]
		if !ok {
			continue
		}
		if problems := validation.IsDNS1123Subdomain(name); len(problems) > 0 {
			return nil, &Problem{Reason: ReasonInvalidAnnotation, Message: fmt.Sprintf(
				"annotation %s must name an IronCore Prefix, and %q is no object name: %s", key, name, strings.Join(problems, "; "))}
		}
		prefixes[family] = name
	}
	return prefixes, nil
}

// addressPrefixes are the Prefixes an Internal Service's addresses come from, by IP family:
// its own where it names one, the cloud-config's otherwise.
func addressPrefixes(service *corev1.Service, settings Settings) (map[corev1.IPFamily]string, error) {
	own, err := annotatedPrefixes(service)
	if err != nil {
		return nil, err
	}
	prefixes := maps.Clone(settings.InternalPrefixes)
	if prefixes == nil {
		prefixes = map[corev1.IPFamily]string{}
	}
	maps.Copy(prefixes, own)
	return prefixes, nil
}

// ServicePrefixes are the Service's own Prefixes desired allocates from, to check before it is made.
func ServicePrefixes(service *corev1.Service, desired *networkingv1alpha1.LoadBalancer) map[corev1.IPFamily]string {
	own, err := annotatedPrefixes(service)
	if err != nil || desired.Spec.Type != networkingv1alpha1.LoadBalancerTypeInternal {
		return nil
	}
	used := map[corev1.IPFamily]string{}
	for _, source := range desired.Spec.IPs {
		if source.Ephemeral == nil || source.Ephemeral.PrefixTemplate == nil || source.Ephemeral.PrefixTemplate.Spec.ParentRef == nil {
			continue
		}
		spec := source.Ephemeral.PrefixTemplate.Spec
		if name, ok := own[spec.IPFamily]; ok && name == spec.ParentRef.Name {
			used[spec.IPFamily] = name
		}
	}
	return used
}

// ignoredPrefixes notes the Prefix annotations that do not apply to the Service.
func ignoredPrefixes(service *corev1.Service, internal bool) []Problem {
	own, err := annotatedPrefixes(service)
	if err != nil || len(own) == 0 {
		return nil
	}
	var notes []Problem
	for _, family := range slices.Sorted(maps.Keys(own)) {
		switch {
		case !internal:
			notes = append(notes, Problem{Reason: ReasonPrefixIgnored, Message: fmt.Sprintf(
				"annotation %s is ignored: IronCore chooses the addresses of Public LoadBalancers; only an Internal one (%s: \"true\") allocates from a Prefix",
				prefixAnnotations[family], keys.AnnotationInternalLoadBalancer)})
		case !slices.Contains(ipFamilies(service), family):
			notes = append(notes, Problem{Reason: ReasonPrefixIgnored, Message: fmt.Sprintf(
				"annotation %s is ignored: the Service has no %s family (its IP families are %v)", prefixAnnotations[family], family, ipFamilies(service))})
		}
	}
	return notes
}

// keptPrefixes notes Prefix annotations that an existing Internal LoadBalancer does not follow.
func keptPrefixes(service *corev1.Service, existing *networkingv1alpha1.LoadBalancer) []Problem {
	own, err := annotatedPrefixes(service)
	if err != nil || len(own) == 0 {
		return nil
	}
	var notes []Problem
	for _, source := range existing.Spec.IPs {
		if source.Ephemeral == nil || source.Ephemeral.PrefixTemplate == nil || source.Ephemeral.PrefixTemplate.Spec.ParentRef == nil {
			continue
		}
		spec := source.Ephemeral.PrefixTemplate.Spec
		if name, ok := own[spec.IPFamily]; ok && name != spec.ParentRef.Name {
			notes = append(notes, Problem{Reason: ReasonLoadBalancerIPKept, Message: fmt.Sprintf(
				"IronCore LoadBalancer %s keeps its %s address from Prefix %s; annotation %s (%s) applies when a LoadBalancer is made: "+
					"changing the address would cut its clients off. Re-create the Service to move it.",
				existing.Name, spec.IPFamily, spec.ParentRef.Name, prefixAnnotations[spec.IPFamily], name)})
		}
	}
	return notes
}
