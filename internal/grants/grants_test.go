package grants

import (
	"strings"
	"testing"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	ipamv1alpha1 "github.com/ironcore-dev/ironcore/api/ipam/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
)

func retained(from, handedTo string) *networkingv1alpha1.LoadBalancer {
	lb := &networkingv1alpha1.LoadBalancer{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{keys.AnnotationRetainedFrom: from}}}
	if handedTo != "" {
		lb.Annotations[keys.AnnotationRetainedFor] = handedTo
	}
	return lb
}

// TestRetainedFor: a retained LoadBalancer is its namespace's, or the one it was handed to.
func TestRetainedFor(t *testing.T) {
	for _, tc := range []struct{ from, handedTo, want string }{
		{"team-a/web", "", "team-a"},
		{"team-a/web", "team-b", "team-b"},
		{"team-a/web", " team-b ", "team-b"},
		{"team-a/web", "  ", "team-a"},
		{"", "", ""},
	} {
		if got := RetainedFor(retained(tc.from, tc.handedTo)); got != tc.want {
			t.Errorf("retained from %q, handed to %q: %q, want %q", tc.from, tc.handedTo, got, tc.want)
		}
	}
}

func pool(cidr string, labels, annotations map[string]string) *ipamv1alpha1.Prefix {
	prefix := &ipamv1alpha1.Prefix{ObjectMeta: metav1.ObjectMeta{Name: "pool", Labels: labels, Annotations: annotations}}
	prefix.Spec.Prefix = commonv1alpha1.MustParseNewIPPrefix(cidr)
	return prefix
}

// TestPool: a Prefix is a pool for a namespace only if designated, and listed if it lists
// namespaces; never if another object controls it or it is a single address.
func TestPool(t *testing.T) {
	designated := map[string]string{keys.LabelLoadBalancerPool: "true"}
	controller := true
	owned := pool("10.0.0.0/24", designated, nil)
	owned.OwnerReferences = []metav1.OwnerReference{{Kind: "NetworkInterface", Name: "worker-a", Controller: &controller}}
	allocated := &ipamv1alpha1.Prefix{ObjectMeta: metav1.ObjectMeta{Labels: designated}, Spec: ipamv1alpha1.PrefixSpec{IPFamily: corev1.IPv6Protocol, PrefixLength: 128}}
	for _, tc := range []struct {
		name      string
		prefix    *ipamv1alpha1.Prefix
		namespace string
		want      string
	}{
		{"designated", pool("10.0.0.0/24", designated, nil), "team-a", ""},
		{"listed", pool("10.0.0.0/24", designated, map[string]string{keys.AnnotationLoadBalancerPoolNamespaces: "team-b, team-a"}), "team-a", ""},
		{"not listed", pool("10.0.0.0/24", designated, map[string]string{keys.AnnotationLoadBalancerPoolNamespaces: "team-b"}), "team-a", "is not given to this namespace"},
		{"empty list", pool("10.0.0.0/24", designated, map[string]string{keys.AnnotationLoadBalancerPoolNamespaces: ""}), "team-a", "is not given to this namespace"},
		{"not designated", pool("10.0.0.0/24", nil, nil), "team-a", "is not designated"},
		{"designated otherwise", pool("10.0.0.0/24", map[string]string{keys.LabelLoadBalancerPool: "yes"}, nil), "team-a", "is not designated"},
		{"controlled", owned, "team-a", "belongs to NetworkInterface worker-a"},
		{"single", pool("10.0.0.7/32", designated, nil), "team-a", "is a single address"},
		{"single to be", allocated, "team-a", "is a single address"},
	} {
		got := Pool(tc.prefix, tc.namespace)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// FuzzPool: whatever the platform team writes on a Prefix, a namespace is granted it only if it
// is designated and, if it lists namespaces, listed by exact name; and the answer never panics.
func FuzzPool(f *testing.F) {
	f.Add("true", "team-a,team-b", true, "team-a", "10.0.0.0/24")
	f.Add("true", " team-a ", true, "team-a", "fd00::/64")
	f.Add("false", "", false, "team-a", "10.0.0.1/32")
	f.Add("true", ",", true, "", "10.0.0.0/8")
	f.Fuzz(func(t *testing.T, label, namespaces string, limited bool, namespace, cidr string) {
		prefix := &ipamv1alpha1.Prefix{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{keys.LabelLoadBalancerPool: label}}}
		if limited {
			prefix.Annotations = map[string]string{keys.AnnotationLoadBalancerPoolNamespaces: namespaces}
		}
		if parsed, err := commonv1alpha1.ParseNewIPPrefix(cidr); err == nil {
			prefix.Spec.Prefix = parsed
		}
		if Pool(prefix, namespace) != "" {
			return
		}
		if label != "true" {
			t.Fatalf("granted with label %q", label)
		}
		if limited && (namespace == "" || !Listed(namespaces, namespace)) {
			t.Fatalf("namespace %q granted by the list %q", namespace, namespaces)
		}
		if prefix.Spec.Prefix != nil && prefix.Spec.Prefix.Bits() == prefix.Spec.Prefix.Addr().BitLen() {
			t.Fatalf("single address %s granted as a pool", cidr)
		}
	})
}

// FuzzRetainedFor: the namespace a retained LoadBalancer is for is the handover's, trimmed, or
// the one it came from; it never contains a slash.
func FuzzRetainedFor(f *testing.F) {
	f.Add("team-a/web", "")
	f.Add("team-a/web", "team-b")
	f.Add("nonsense", " ")
	f.Fuzz(func(t *testing.T, from, handedTo string) {
		got := RetainedFor(retained(from, handedTo))
		switch want := strings.TrimSpace(handedTo); {
		case want != "" && got != want:
			t.Fatalf("handed to %q: %q", handedTo, got)
		case want == "" && !strings.HasPrefix(from, got):
			t.Fatalf("retained from %q: %q", from, got)
		case want == "" && strings.Contains(got, "/"):
			t.Fatalf("retained from %q: %q contains a slash", from, got)
		}
	})
}
