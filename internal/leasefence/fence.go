// Package leasefence stops a replica that has lost its leader lease, without knowing it yet,
// from writing to IronCore. A leader that is paused (a frozen VM, a stopped process, a long
// pause of its runtime) past its lease resumes with its controllers mid-work: client-go's
// leader election notices the loss only when its next renewal fails, up to the renew deadline
// later, and until then every worker goes on writing while another replica already leads.
// The fence lets a write through only while the lease names this replica and was renewed
// within the renew deadline by this process's clock; the other replica waits a whole lease
// duration, which is longer, before it takes over.
package leasefence

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// Fence follows the leader lease of this replica.
type Fence struct {
	namespace, name string
	renewDeadline   time.Duration
	client          kubernetes.Interface
	now             func() time.Time

	mu sync.Mutex
	// identity is this replica's holder identity, learned when it began to lead; empty until
	// then, and every write waits for it.
	identity string
	// lease is the lease as last seen.
	lease *coordinationv1.Lease
	// refusing is whether the last check refused, so that the change is logged once.
	refusing bool
	// readAt is when the lease was last read from the API server because the one seen looked
	// stale: a stalled or forbidden watch must not stop a leader that renews.
	readAt time.Time
}

// liveReadEvery bounds the reads of a lease that looks stale, and liveReadTimeout each.
const (
	liveReadEvery   = time.Second
	liveReadTimeout = 2 * time.Second
)

// New returns a fence for the lease namespace/name, renewed by this replica's leader election
// with renewDeadline; client reads the lease with the leader election's identity.
func New(namespace, name string, renewDeadline time.Duration, client kubernetes.Interface) *Fence {
	return &Fence{namespace: namespace, name: name, renewDeadline: renewDeadline, client: client, now: time.Now}
}

// RenewDeadline is the renew deadline the fence holds the lease to.
func (f *Fence) RenewDeadline() time.Duration { return f.renewDeadline }

// Arm learns this replica's identity from the lease, which it has just acquired, and follows
// the lease until ctx ends; it returns once armed, retrying reads until then. Call it once
// leading has begun: the framework's leader election does not say who it is, but right after
// acquiring, the lease's holder is this replica. Until armed, every write is refused.
func (f *Fence) Arm(ctx context.Context) error {
	leading := f.now()
	hostname, _ := os.Hostname()
	var lease *coordinationv1.Lease
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var err error
		lease, err = f.client.CoordinationV1().Leases(f.namespace).Get(ctx, f.name, metav1.GetOptions{})
		if err == nil {
			err = f.ours(lease, leading, hostname)
		}
		if err != nil {
			klog.ErrorS(err, "Not writing to IronCore until this replica is known to hold the leader lease", "lease", klog.KRef(f.namespace, f.name))
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("read leader lease %s/%s to learn this replica's identity: %w", f.namespace, f.name, err)
	}
	f.mu.Lock()
	f.identity, f.lease = *lease.Spec.HolderIdentity, lease
	f.mu.Unlock()
	klog.InfoS("Writing to IronCore only while holding the leader lease", "lease", klog.KObj(lease), "identity", *lease.Spec.HolderIdentity, "renewDeadline", f.renewDeadline)

	factory := informers.NewSharedInformerFactoryWithOptions(f.client, 0, informers.WithNamespace(f.namespace),
		informers.WithTweakListOptions(func(options *metav1.ListOptions) {
			options.FieldSelector = fields.OneTermEqualSelector("metadata.name", f.name).String()
		}))
	_, err = factory.Coordination().V1().Leases().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    f.observe,
		UpdateFunc: func(_, obj any) { f.observe(obj) },
	})
	if err != nil {
		return fmt.Errorf("follow leader lease %s/%s: %w", f.namespace, f.name, err)
	}
	factory.Start(ctx.Done())
	return nil
}

// ours checks that the lease, read after leading began, can be this replica's: the framework
// names a replica <hostname>_<random>, a lease another replica acquired since this one began to
// lead is not this one's, and this one renews its lease well within the renew deadline. A
// replica paused between acquiring and arming finds the lease stale or another's, and stays
// unarmed until its leader election ends the process.
func (f *Fence) ours(lease *coordinationv1.Lease, leading time.Time, hostname string) error {
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	switch {
	case holder == "":
		return errors.New("the lease has no holder")
	case hostname != "" && !strings.HasPrefix(holder, hostname+"_"):
		return fmt.Errorf("the lease is held by %q, not a replica on this host (%s)", holder, hostname)
	case lease.Spec.AcquireTime != nil && lease.Spec.AcquireTime.After(leading):
		return fmt.Errorf("the lease was acquired by %q after this replica began to lead", holder)
	case lease.Spec.RenewTime == nil || f.now().Sub(lease.Spec.RenewTime.Time) >= f.renewDeadline:
		return fmt.Errorf("the lease held by %q was not renewed within the renew deadline %s", holder, f.renewDeadline)
	}
	return nil
}

func (f *Fence) observe(obj any) {
	lease, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lease = lease
}

// Check returns nil if this replica may write now, or why not.
func (f *Fence) Check() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	err := f.check()
	if err != nil && f.identity != "" && f.now().Sub(f.readAt) >= liveReadEvery {
		// The lease seen may be stale rather than lost: read it, and look again.
		f.readAt = f.now()
		ctx, cancel := context.WithTimeout(context.Background(), liveReadTimeout)
		lease, getErr := f.client.CoordinationV1().Leases(f.namespace).Get(ctx, f.name, metav1.GetOptions{})
		cancel()
		if getErr == nil {
			f.lease = lease
			err = f.check()
		}
	}
	if (err != nil) != f.refusing {
		f.refusing = err != nil
		if err != nil {
			klog.InfoS("Stopped writing to IronCore", "reason", err.Error())
		} else {
			klog.InfoS("Writing to IronCore again: the leader lease is held and current", "lease", klog.KRef(f.namespace, f.name))
		}
	}
	return err
}

func (f *Fence) check() error {
	if f.identity == "" {
		return fmt.Errorf("not writing to IronCore: this replica has not confirmed that it holds the leader lease %s/%s yet", f.namespace, f.name)
	}
	spec := f.lease.Spec
	if holder := ptr.Deref(spec.HolderIdentity, ""); holder != f.identity {
		return fmt.Errorf("not writing to IronCore: the leader lease %s/%s is held by %q, not this replica", f.namespace, f.name, holder)
	}
	if spec.RenewTime == nil {
		return fmt.Errorf("not writing to IronCore: the leader lease %s/%s has no renew time", f.namespace, f.name)
	}
	if age := f.now().Sub(spec.RenewTime.Time); age >= f.renewDeadline {
		return fmt.Errorf("not writing to IronCore: the leader lease %s/%s was last renewed %s ago, not within the renew deadline %s; another replica may lead",
			f.namespace, f.name, age.Round(time.Millisecond), f.renewDeadline)
	}
	return nil
}
