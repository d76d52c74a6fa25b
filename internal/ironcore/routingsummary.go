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

// The caches of LoadBalancerRoutings keep a summary of each routing's destinations, not the
// destinations: one per target, they are most of what a routing weighs (about 140 KB decoded
// at 1,000 Nodes, so 40 MB for 300 Services), and the CCM only ever compares them with the
// routing it wants or counts them. The summary is held in two annotations of the cached copy,
// which is never written back; the API server's routing is read where the destinations
// themselves are needed (LiveLoadBalancerRouting).
const (
	annotationDestinationsDigest = "cache.ironcore-ccm.internal/destinations-digest"
	annotationDestinationsCount  = "cache.ironcore-ccm.internal/destinations"
	// annotationDestinationTargets names the NetworkInterfaces of a routing with at most
	// namedTargetsUpTo destinations, comma-separated: a new Service's routing holds only its
	// first targets, chosen again at each sync, and those routed now are kept.
	annotationDestinationTargets = "cache.ironcore-ccm.internal/destination-targets"
	namedTargetsUpTo             = 8
)

// RoutingTargets names the NetworkInterfaces a routing's destinations refer to, for a routing
// read from the API server or built to be written, and for one read from the cache if it has
// at most a few destinations; ok is false for a larger one read from the cache.
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

// RoutingDigest identifies a routing's network and destinations, for a routing read from the
// cache as for one read from the API server or built to be written. It is a hash, not the text
// hashed: the text grows with the number of Nodes.
func RoutingDigest(routing *networkingv1alpha1.LoadBalancerRouting) string {
	if digest, summarized := routing.Annotations[annotationDestinationsDigest]; summarized && routing.Destinations == nil {
		return digest
	}
	return destinationsDigest(routing)
}

// RoutingDestinationCount is the number of a routing's destinations, for a routing read from
// the cache as for one read from the API server.
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
	// One buffer for every destination: a routing has one per Node, and every routing event
	// and write digests all of them. The bytes are those of the strings ";IP" and
	// ",UID,name,providerID" per destination.
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

// summarizeRoutings is the transform of the routing informers: it strips the managed fields,
// as every informer of the cache does, and replaces the destinations with their summary.
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
