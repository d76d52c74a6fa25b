package inspect

import (
	"cmp"
	"io"
	"slices"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
)

// Retained is a LoadBalancer of this cluster kept after its Service, with its addresses, for
// a later Service to take over (or to be deleted on IronCore to release them).
type Retained struct {
	LoadBalancer string   `json:"loadBalancer"`
	Type         string   `json:"type"`
	IPs          []string `json:"ips"`
	// From is the Service it was retained from (namespace/name), and At when (RFC 3339).
	From string `json:"retainedFrom"`
	At   string `json:"retainedAt"`
}

// findRetained lists, of lbs, the LoadBalancers this cluster retained after their Service.
func (in *inspection) findRetained(lbs []networkingv1alpha1.LoadBalancer) []Retained {
	retained := []Retained{}
	for i := range lbs {
		lb := &lbs[i]
		if !ironcore.Retained(lb) || ironcore.OwnerOf(lb).Cluster != in.cluster || lb.DeletionTimestamp != nil {
			continue
		}
		retained = append(retained, Retained{
			LoadBalancer: lb.Name,
			Type:         string(lb.Spec.Type),
			IPs:          ipStrings(lb.Status.IPs),
			From:         lb.Annotations[keys.AnnotationRetainedFrom],
			At:           lb.Annotations[keys.AnnotationRetainedAt],
		})
	}
	slices.SortFunc(retained, func(a, b Retained) int { return cmp.Compare(a.LoadBalancer, b.LoadBalancer) })
	return retained
}

func (r *Report) writeRetained(w io.Writer) error {
	return writeSection(w, "RETAINED LOADBALANCERS", none, "LOADBALANCER\tTYPE\tIPS\tRETAINED FROM\tRETAINED AT", r.Retained, func(lb Retained) []string {
		return []string{lb.LoadBalancer, lb.Type, joinOrNone(lb.IPs), cell(lb.From), cell(lb.At)}
	})
}
