package ironcore

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// Cached LoadBalancerRoutings hold, in annotations, a summary of their destinations instead of
// them: they are most of a routing's weight (40 MB for 300 Services at 1,000 Nodes), and the CCM
// only compares or counts them. Cached copies are never written back; LiveLoadBalancerRouting
// reads the destinations themselves.
const (
	annotationDestinationsDigest = "cache.ironcore-ccm.internal/destinations-digest"
	annotationDestinationsCount  = "cache.ironcore-ccm.internal/destinations"
	// annotationDestinationTargets names, comma-separated, the targets of a routing with at most
	// namedTargetsUpTo destinations: a new Service's routing holds only its first targets, and
	// each sync keeps those.
	annotationDestinationTargets = "cache.ironcore-ccm.internal/destination-targets"
	namedTargetsUpTo             = 8
)

// RoutingTargets names the NetworkInterfaces a routing's destinations refer to; ok is false for
// a cached routing too large for them to be kept.
func RoutingTargets(routing *networkingv1alpha1.LoadBalancerRouting) (names []string, ok bool) {
	if _, summarized := routing.Annotations[annotationDestinationsDigest]; summarized && routing.Destinations == nil {
		targets, named := routing.Annotations[annotationDestinationTargets]
		if !named || targets == "" {
			return nil, named
		}
		return strings.Split(targets, ","), true
	}
	for _, destination := range routing.Destinations {
		if destination.TargetRef != nil {
			names = append(names, destination.TargetRef.Name)
		}
	}
	return names, true
}

// RoutingDigest identifies a routing's network and destinations, cached or not, with a hash.
func RoutingDigest(routing *networkingv1alpha1.LoadBalancerRouting) string {
	if digest, summarized := routing.Annotations[annotationDestinationsDigest]; summarized && routing.Destinations == nil {
		return digest
	}
	return destinationsDigest(routing)
}

// RoutingDestinationCount is the number of a routing's destinations, cached or not.
func RoutingDestinationCount(routing *networkingv1alpha1.LoadBalancerRouting) int {
	if count, summarized := routing.Annotations[annotationDestinationsCount]; summarized && routing.Destinations == nil {
		if n, err := strconv.Atoi(count); err == nil {
			return n
		}
	}
	return len(routing.Destinations)
}

func destinationsDigest(routing *networkingv1alpha1.LoadBalancerRouting) string {
	h := sha256.New()
	// One buffer for all destinations, as every routing event and write digests them.
	buf := make([]byte, 0, 256)
	buf = append(buf, routing.NetworkRef.Name...)
	buf = append(buf, '/')
	buf = append(buf, routing.NetworkRef.UID...)
	for _, destination := range routing.Destinations {
		buf = append(buf, ';')
		if destination.IP.IsValid() {
			buf = destination.IP.AppendTo(buf)
		} else {
			buf = append(buf, destination.IP.String()...)
		}
		if ref := destination.TargetRef; ref != nil {
			buf = append(buf, ',')
			buf = append(buf, ref.UID...)
			buf = append(buf, ',')
			buf = append(buf, ref.Name...)
			buf = append(buf, ',')
			buf = append(buf, ref.ProviderID...)
		}
		_, _ = h.Write(buf)
		buf = buf[:0]
	}
	_, _ = h.Write(buf)
	return hex.EncodeToString(h.Sum(nil))
}

// summarizeRoutings strips the managed fields, as every informer does, and summarizes.
func summarizeRoutings() func(any) (any, error) {
	strip := cache.TransformStripManagedFields()
	return func(obj any) (any, error) {
		obj, err := strip(obj)
		if err != nil {
			return nil, err
		}
		routing, ok := obj.(*networkingv1alpha1.LoadBalancerRouting)
		if !ok || routing.Destinations == nil && routing.Annotations[annotationDestinationsDigest] != "" {
			// Not a routing, or summarized already: a transform must be idempotent.
			return obj, nil
		}
		annotations := make(map[string]string, len(routing.Annotations)+2)
		for key, value := range routing.Annotations {
			annotations[key] = value
		}
		annotations[annotationDestinationsDigest] = destinationsDigest(routing)
		annotations[annotationDestinationsCount] = fmt.Sprint(len(routing.Destinations))
		if len(routing.Destinations) <= namedTargetsUpTo {
			names, _ := RoutingTargets(routing)
			annotations[annotationDestinationTargets] = strings.Join(names, ",")
		}
		routing.Annotations = annotations
		routing.Destinations = nil
		return routing, nil
	}
}
