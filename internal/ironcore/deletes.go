package ironcore

import (
	"sync"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// deletedLoadBalancers remembers the LoadBalancers this client deleted until the cache shows
// them deleted or being deleted: a cached copy older than the delete must not be taken for a
// LoadBalancer that serves (a type switch back to the type just deleted would show its old
// addresses).
type deletedLoadBalancers struct {
	mu   sync.Mutex
	uids map[types.UID]metav1.Time
}

// deleting calls del, which deletes the LoadBalancer uid, and remembers the delete unless it
// failed. The delete is recorded before it is made: the cache may show it before del returns.
func (d *deletedLoadBalancers) deleting(uid types.UID, del func() error) error {
	d.mu.Lock()
	if d.uids == nil {
		d.uids = map[types.UID]metav1.Time{}
	}
	d.uids[uid] = metav1.Now()
	d.mu.Unlock()
	err := del()
	if err != nil {
		d.mu.Lock()
		delete(d.uids, uid)
		d.mu.Unlock()
	}
	return err
}

// seen forgets the delete of lb once the cache shows it: gone, or being deleted.
func (d *deletedLoadBalancers) seen(lb *networkingv1alpha1.LoadBalancer, gone bool) {
	if !gone && lb.DeletionTimestamp == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.uids, lb.UID)
}

// mark gives lb, a cached copy the caller owns, the deletion timestamp of this client's delete
// if the cache has not shown that delete yet.
func (d *deletedLoadBalancers) mark(lb *networkingv1alpha1.LoadBalancer) {
	if lb.DeletionTimestamp != nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if at, ok := d.uids[lb.UID]; ok {
		lb.DeletionTimestamp = &at
	}
}
