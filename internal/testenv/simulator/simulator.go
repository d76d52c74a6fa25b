// Package simulator writes what IronCore's status writers would write, which cannot run
// without real hosts: machinepoollet (MachinePool status and topology labels, Machine state and
// NIC attachment) and apinetlet (Network state, NetworkInterface IPs, prefixes and virtual IP,
// VirtualIP and LoadBalancer IPs). It runs controllers against the IronCore API like those
// components do, with a settable latency and injectable faults. It is test support only.
package simulator

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// silentRetry is how often a silent provider looks again whether it may speak.
const silentRetry = 500 * time.Millisecond

// Topology is the zone and region machinepoollet would label a MachinePool with.
type Topology struct {
	Zone, Region string
}

// Simulator plays machinepoollet and apinetlet.
type Simulator struct {
	client client.Client
	// latency delays every status change the simulator makes, as a real provider takes time.
	latency atomic.Int64
	// silent providers write nothing at all until they speak again: a provider that is down.
	silent atomic.Bool

	mu sync.Mutex
	// pools are the MachinePools the simulator hosts, with their topology.
	pools map[string]Topology
	// held objects are left alone: a stuck provider.
	held map[string]bool
	// broken NetworkInterfaces and Networks are reported in state Error.
	broken map[string]bool
	// due records when a pending status change was first seen, to apply latency.
	due map[string]time.Time

	publicIPv4 *allocator
	publicIPv6 *allocator

	// pokes wake each controller for an object whose flags changed.
	pokes []chan event.GenericEvent
}

// New registers the simulator's controllers with mgr.
func New(mgr ctrl.Manager) (*Simulator, error) {
	s := &Simulator{
		client:     mgr.GetClient(),
		pools:      map[string]Topology{},
		held:       map[string]bool{},
		broken:     map[string]bool{},
		due:        map[string]time.Time{},
		publicIPv4: newAllocator(netip.MustParsePrefix("198.18.0.0/15")),
		publicIPv6: newAllocator(netip.MustParsePrefix("2001:db8:ffff::/48")),
	}
	options := controller.Options{SkipNameValidation: ptr.To(true), MaxConcurrentReconciles: 4}
	for _, setup := range []func(ctrl.Manager, controller.Options) error{
		s.setupMachinePools, s.setupMachines, s.setupNetworks, s.setupNetworkInterfaces, s.setupVirtualIPs, s.setupLoadBalancers,
	} {
		if err := setup(mgr, options); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// SetLatency sets how long each simulated status change takes to appear.
func (s *Simulator) SetLatency(d time.Duration) { s.latency.Store(int64(d)) }

// SetSilent makes every simulated provider stop writing (true) until it is called with false:
// no LoadBalancer gets its IPs, no NetworkInterface leaves Pending, no Machine starts. What
// waited is written, after the latency, once the providers speak again.
func (s *Simulator) SetSilent(silent bool) { s.silent.Store(silent) }

// Hold stops the simulator from touching the object, as if its provider were stuck.
func (s *Simulator) Hold(obj client.Object) { s.setFlag(s.held, obj, true) }

// Release undoes Hold.
func (s *Simulator) Release(obj client.Object) {
	s.setFlag(s.held, obj, false)
	s.poke(obj)
}

// Break makes the provider report the NetworkInterface or Network in state Error.
func (s *Simulator) Break(obj client.Object) {
	s.setFlag(s.broken, obj, true)
	s.poke(obj)
}

// Mend undoes Break.
func (s *Simulator) Mend(obj client.Object) {
	s.setFlag(s.broken, obj, false)
	s.poke(obj)
}

// poke makes every controller reconcile obj's name, so a changed flag takes effect at once.
func (s *Simulator) poke(obj client.Object) {
	for _, pokes := range s.pokes {
		pokes <- event.GenericEvent{Object: obj}
	}
}

// pokeSource returns a new source of pokes for one controller.
func (s *Simulator) pokeSource() source.Source {
	pokes := make(chan event.GenericEvent, 64)
	s.pokes = append(s.pokes, pokes)
	return source.Channel(pokes, &handler.EnqueueRequestForObject{})
}

// AddMachinePool creates a MachinePool the simulator hosts, which the simulator labels with
// topology and gives capacity for every MachineClass.
func (s *Simulator) AddMachinePool(ctx context.Context, name string, topology Topology) error {
	s.mu.Lock()
	s.pools[name] = topology
	s.mu.Unlock()
	pool := &computev1alpha1.MachinePool{}
	pool.Name = name
	if err := s.client.Create(ctx, pool); err != nil {
		return fmt.Errorf("create MachinePool %s: %w", name, err)
	}
	return nil
}

func (s *Simulator) setFlag(set map[string]bool, obj client.Object, on bool) {
	key := flagKey(obj)
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		set[key] = true
	} else {
		delete(set, key)
	}
}

func (s *Simulator) flagged(set map[string]bool, obj client.Object) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return set[flagKey(obj)]
}

func flagKey(obj client.Object) string {
	return fmt.Sprintf("%T/%s/%s", obj, obj.GetNamespace(), obj.GetName())
}

// wait returns how much longer a pending change of obj must wait to honour the latency; zero
// means apply it now.
func (s *Simulator) wait(obj client.Object) time.Duration {
	latency := time.Duration(s.latency.Load())
	if latency <= 0 {
		return 0
	}
	key := flagKey(obj)
	s.mu.Lock()
	defer s.mu.Unlock()
	first, ok := s.due[key]
	if !ok {
		s.due[key] = time.Now()
		return latency
	}
	if remaining := latency - time.Since(first); remaining > 0 {
		return remaining
	}
	delete(s.due, key)
	return 0
}

// applyAfterLatency runs write once obj's latency has passed and asks for a requeue until then.
func (s *Simulator) applyAfterLatency(obj client.Object, write func() error) (reconcile.Result, error) {
	if s.silent.Load() {
		return reconcile.Result{RequeueAfter: silentRetry}, nil
	}
	if d := s.wait(obj); d > 0 {
		return reconcile.Result{RequeueAfter: d}, nil
	}
	return reconcile.Result{}, write()
}

// allocator hands out addresses from a prefix, one after another.
type allocator struct {
	mu   sync.Mutex
	next netip.Addr
	end  netip.Prefix
}

func newAllocator(prefix netip.Prefix) *allocator {
	return &allocator{next: prefix.Addr().Next(), end: prefix}
}

func (a *allocator) allocate() (netip.Addr, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.end.Contains(a.next) {
		return netip.Addr{}, fmt.Errorf("simulated public range %s is exhausted", a.end)
	}
	addr := a.next
	a.next = a.next.Next()
	return addr, nil
}
