package ironcore

import (
	"cmp"
	"strings"
	"testing"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/clusterid"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
)

// TestAdoptable: a retained LoadBalancer is taken over only by a Service of this cluster,
// proven by its identity, of the namespace it is retained for, whose LoadBalancer would be of
// its type, Network and IP families; each refusal says why, and one for another namespace does
// not name it.
func TestAdoptable(t *testing.T) {
	id := clusterid.New()
	id.Set("uid-1")
	owners := Owners{Clusters: []string{"lab"}, ID: id}
	retained := func(modify func(*networkingv1alpha1.LoadBalancer)) *networkingv1alpha1.LoadBalancer {
		lb := &networkingv1alpha1.LoadBalancer{
			ObjectMeta: metav1.ObjectMeta{
				Name:        "kept",
				Labels:      map[string]string{keys.LabelClusterName: "lab", keys.LabelRetained: "true", keys.LabelClusterID: "uid-1"},
				Annotations: map[string]string{keys.AnnotationRetainedFrom: "team-a/web"},
			},
			Spec: networkingv1alpha1.LoadBalancerSpec{
				Type: networkingv1alpha1.LoadBalancerTypePublic, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
				NetworkRef: corev1.LocalObjectReference{Name: "net"},
			},
		}
		if modify != nil {
			modify(lb)
		}
		return lb
	}
	desired := retained(func(lb *networkingv1alpha1.LoadBalancer) { lb.Labels = nil })
	for _, tc := range []struct {
		name      string
		modify    func(*networkingv1alpha1.LoadBalancer)
		owners    *Owners
		namespace string
		want      string
	}{
		{name: "adoptable"},
		{name: "handed to the namespace", namespace: "team-b", modify: func(lb *networkingv1alpha1.LoadBalancer) { lb.Annotations[keys.AnnotationRetainedFor] = "team-b" }},
		{name: "of another namespace", namespace: "team-b", want: "is retained for another namespace"},
		{name: "handed to another namespace", modify: func(lb *networkingv1alpha1.LoadBalancer) { lb.Annotations[keys.AnnotationRetainedFor] = "team-b" }, want: "is retained for another namespace"},
		{name: "without identity", modify: func(lb *networkingv1alpha1.LoadBalancer) { delete(lb.Labels, keys.LabelClusterID) }, want: "does not carry this cluster's identity"},
		{name: "another identity", modify: func(lb *networkingv1alpha1.LoadBalancer) { lb.Labels[keys.LabelClusterID] = "uid-2" }, want: "is not retained by this cluster"},
		{name: "identity unknown", owners: &Owners{Clusters: []string{"lab"}, ID: clusterid.New()}, want: "does not know its cluster's identity"},
		{name: "another cluster's", modify: func(lb *networkingv1alpha1.LoadBalancer) { lb.Labels[keys.LabelClusterName] = "other" }, want: `cluster "other" retained it`},
		{name: "not retained", modify: func(lb *networkingv1alpha1.LoadBalancer) { delete(lb.Labels, keys.LabelRetained) }, want: "is not retained by this cluster"},
		{name: "being deleted", modify: func(lb *networkingv1alpha1.LoadBalancer) { lb.DeletionTimestamp = &metav1.Time{} }, want: "is being deleted"},
		{name: "other type", modify: func(lb *networkingv1alpha1.LoadBalancer) { lb.Spec.Type = networkingv1alpha1.LoadBalancerTypeInternal }, want: "is Internal and the Service asks for Public"},
		{name: "other Network", modify: func(lb *networkingv1alpha1.LoadBalancer) { lb.Spec.NetworkRef.Name = "old" }, want: "is on Network old, not on the cluster's Network net"},
		{name: "other families", modify: func(lb *networkingv1alpha1.LoadBalancer) {
			lb.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
		}, want: "has the IP families [IPv4 IPv6] and the Service asks for [IPv4]"},
	} {
		who, namespace := cmp.Or(tc.owners, &owners), cmp.Or(tc.namespace, "team-a")
		err := who.Adoptable(retained(tc.modify), desired, namespace)
		if err != nil && namespace != "team-a" && strings.Contains(err.Error(), "team-a") {
			t.Errorf("%s: the refusal names the other namespace: %v", tc.name, err)
		}
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.want)
		}
	}
}
