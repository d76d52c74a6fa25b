package leasefence

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestCheck(t *testing.T) {
	now := time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)
	lease := func(holder string, renewedAgo time.Duration) *coordinationv1.Lease {
		return &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(holder),
			RenewTime:      ptr.To(metav1.NewMicroTime(now.Add(-renewedAgo))),
		}}
	}
	for _, tc := range []struct {
		name     string
		identity string
		lease    *coordinationv1.Lease
		refusal  string // empty: allowed
	}{
		{name: "not armed", lease: lease("a", 0), refusal: "has not confirmed"},
		{name: "held and current", identity: "a", lease: lease("a", 2*time.Second)},
		{name: "held by another", identity: "a", lease: lease("b", 0), refusal: `held by "b"`},
		{name: "renewed just within the deadline", identity: "a", lease: lease("a", 10*time.Second-time.Millisecond)},
		{name: "not renewed within the deadline", identity: "a", lease: lease("a", 10*time.Second), refusal: "last renewed 10s ago"},
		{name: "no renew time", identity: "a", lease: &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a")}}, refusal: "no renew time"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := New("kube-system", "cloud-controller-manager", 10*time.Second, nil)
			f.now = func() time.Time { return now }
			f.identity = tc.identity
			f.observe(tc.lease)
			err := f.check()
			switch {
			case tc.refusal == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.refusal != "" && (err == nil || !strings.Contains(err.Error(), tc.refusal)):
				t.Fatalf("got %v, want a refusal saying %q", err, tc.refusal)
			}
		})
	}
}

func TestOurs(t *testing.T) {
	now := time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)
	leading := now.Add(-2 * time.Second)
	lease := func(holder string, acquired, renewed time.Time) *coordinationv1.Lease {
		return &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(holder),
			AcquireTime:    ptr.To(metav1.NewMicroTime(acquired)),
			RenewTime:      ptr.To(metav1.NewMicroTime(renewed)),
		}}
	}
	for _, tc := range []struct {
		name    string
		lease   *coordinationv1.Lease
		refusal string
	}{
		{name: "acquired before leading began, renewed", lease: lease("node-a_1234", leading.Add(-time.Second), now.Add(-time.Second))},
		{name: "another host's replica", lease: lease("node-b_5678", leading.Add(-time.Second), now), refusal: "not a replica on this host"},
		{name: "acquired after leading began", lease: lease("node-a_5678", leading.Add(time.Second), now), refusal: "after this replica began to lead"},
		{name: "not renewed within the deadline", lease: lease("node-a_1234", leading.Add(-time.Minute), now.Add(-10*time.Second)), refusal: "not renewed within"},
		{name: "no holder", lease: &coordinationv1.Lease{}, refusal: "no holder"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := New("kube-system", "cloud-controller-manager", 10*time.Second, nil)
			f.now = func() time.Time { return now }
			err := f.ours(tc.lease, leading, "node-a")
			switch {
			case tc.refusal == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.refusal != "" && (err == nil || !strings.Contains(err.Error(), tc.refusal)):
				t.Fatalf("got %v, want a refusal saying %q", err, tc.refusal)
			}
		})
	}
}
