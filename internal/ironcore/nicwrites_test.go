package ironcore_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// TestChangesDueTogetherShareOneWrite: the cluster label, the load balancer target label and
// a route prefix of one NetworkInterface, asked for by three callers while the client waits
// for a token of its rate limiter, are written in one patch, and nothing else on the
// NetworkInterface (another writer's label and prefix) is lost.
func TestChangesDueTogetherShareOneWrite(t *testing.T) {
	gate := &gateLimiter{}
	ctx, c := stack.StartIronCoreClientForTest(t, gate)
	machine := stack.CreateMachineForTest(t, "combined", testenv.MachineOptions{Unschedulable: true})
	name := testenv.NetworkInterfaceName(machine.Name)
	// Another writer's label and prefix, in the cache before the changes.
	nic := &networkingv1alpha1.NetworkInterface{}
	testenv.Await(t, ctx, time.Minute, "the NetworkInterface", func(ctx context.Context) error {
		return stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: name}, nic)
	})
	base := nic.DeepCopy()
	nic.Labels = map[string]string{"example.org/other": "x"}
	nic.Spec.Prefixes = append(nic.Spec.Prefixes, networkingv1alpha1.PrefixSource{Value: commonv1alpha1.MustParseNewIPPrefix("10.201.0.0/24")})
	if err := stack.IronCore.Client.Patch(ctx, nic, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	testenv.Await(t, ctx, time.Minute, "the other writer's changes in the cache", func(ctx context.Context) error {
		cached, err := c.NetworkInterface(ctx, name)
		if err != nil || cached.Labels["example.org/other"] != "x" {
			return errors.Join(err, errors.New("not yet"))
		}
		return nil
	})
	cached, err := c.NetworkInterface(ctx, name)
	if err != nil {
		t.Fatal(err)
	}

	gate.close()
	stack.IronCoreProxy.Reset()
	route := netip.MustParsePrefix("10.200.0.0/24")
	changes := []func() error{
		func() error {
			_, err := c.AddLabel(ctx, cached, keys.LabelCluster, stack.ClusterName)
			return err
		},
		func() error { return c.SetLabel(ctx, cached, keys.LabelLoadBalancerTarget, stack.ClusterName) },
		func() error {
			return c.UpdateNetworkInterface(ctx, name, false, func(nic *networkingv1alpha1.NetworkInterface) (bool, error) {
				nic.Spec.Prefixes = append(nic.Spec.Prefixes, networkingv1alpha1.PrefixSource{Value: &commonv1alpha1.IPPrefix{Prefix: route}})
				return true, nil
			})
		},
	}
	var wg sync.WaitGroup
	errs := make([]error, len(changes))
	for i, change := range changes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = change()
		}()
	}
	testenv.Await(t, ctx, time.Minute, "all three changes waiting", func(context.Context) error {
		if n := c.WaitingNetworkInterfaceChanges(); n != len(changes) {
			return fmt.Errorf("%d waiting", n)
		}
		return nil
	})
	gate.open()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}

	if patches := nicPatches(); patches != 1 {
		t.Errorf("%d patches of the NetworkInterface, want 1 for the three changes", patches)
	}
	live := &networkingv1alpha1.NetworkInterface{}
	if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: name}, live); err != nil {
		t.Fatal(err)
	}
	var prefixes []string
	for _, prefix := range live.Spec.Prefixes {
		if prefix.Value != nil {
			prefixes = append(prefixes, prefix.Value.String())
		}
	}
	if live.Labels[keys.LabelCluster] != stack.ClusterName || live.Labels[keys.LabelLoadBalancerTarget] != stack.ClusterName ||
		live.Labels["example.org/other"] != "x" || !slices.Contains(prefixes, "10.201.0.0/24") || !slices.Contains(prefixes, route.String()) {
		t.Errorf("labels %v, prefixes %v; want both labels of this cluster, the route, and the other writer's label and prefix", live.Labels, prefixes)
	}
}

// gateLimiter lets requests through only while open; it starts open.
type gateLimiter struct {
	mu     sync.Mutex
	closed chan struct{}
}

func (g *gateLimiter) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed == nil {
		g.closed = make(chan struct{})
	}
}

func (g *gateLimiter) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed != nil {
		close(g.closed)
		g.closed = nil
	}
}

func (g *gateLimiter) Wait(ctx context.Context) error {
	g.mu.Lock()
	closed := g.closed
	g.mu.Unlock()
	if closed == nil {
		return nil
	}
	select {
	case <-closed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gateLimiter) TryAccept() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed == nil
}

func (g *gateLimiter) Accept()      { _ = g.Wait(context.Background()) }
func (g *gateLimiter) Stop()        {}
func (g *gateLimiter) QPS() float32 { return 0 }

// countingLimiter lets every request through and counts the tokens taken.
type countingLimiter struct {
	mu     sync.Mutex
	tokens int
}

func (l *countingLimiter) Wait(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tokens++
	return nil
}

func (l *countingLimiter) taken() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tokens
}

func (l *countingLimiter) TryAccept() bool { return l.Wait(context.Background()) == nil }
func (l *countingLimiter) Accept()         { _ = l.Wait(context.Background()) }
func (l *countingLimiter) Stop()           {}
func (l *countingLimiter) QPS() float32    { return 0 }

// TestALaterChangeGoesWithTheNextWrite: a change that may wait is written with the next change
// of its NetworkInterface, whoever asks for it, in one patch; with none to go with, it is
// written on its own once its wait is over.
func TestALaterChangeGoesWithTheNextWrite(t *testing.T) {
	ctx, c := stack.StartIronCoreClientForTest(t, nil)
	machine := stack.CreateMachineForTest(t, "later", testenv.MachineOptions{Unschedulable: true})
	name := testenv.NetworkInterfaceName(machine.Name)
	waitCached(t, ctx, "the NetworkInterface", c.NetworkInterface, name)
	label := func(key string) func(*networkingv1alpha1.NetworkInterface) (bool, error) {
		return func(nic *networkingv1alpha1.NetworkInterface) (bool, error) {
			if nic.Labels == nil {
				nic.Labels = map[string]string{}
			}
			nic.Labels[key] = "1"
			return true, nil
		}
	}
	type outcome struct {
		wrote bool
		err   error
	}
	done := make(chan outcome, 2)
	report := func(wrote bool, err error) { done <- outcome{wrote, err} }
	stack.IronCoreProxy.Reset()

	c.UpdateNetworkInterfaceLater(ctx, name, time.Hour, label("example.org/later"), report)
	// Another writer's change, seen in the cache: long enough for a change queued at once to be
	// written, and this one still waits.
	stack.Relabel(t, &networkingv1alpha1.NetworkInterface{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: name}}, map[string]string{"example.org/other": "1"})
	testenv.Await(t, ctx, time.Minute, "the other writer's label in the cache", func(ctx context.Context) error {
		cached, err := c.NetworkInterface(ctx, name)
		if err == nil && cached.Labels["example.org/other"] != "1" {
			err = errors.New("not yet")
		}
		return err
	})
	if patches, waiting := nicPatches(), c.WaitingNetworkInterfaceChanges(); patches != 0 || waiting != 1 {
		t.Fatalf("%d patches and %d changes waiting before another change of the NetworkInterface, want none and the later one", patches, waiting)
	}
	// The route's write, as CreateRoute makes it.
	route := netip.MustParsePrefix("10.202.0.0/24")
	if err := c.UpdateNetworkInterface(ctx, name, false, func(nic *networkingv1alpha1.NetworkInterface) (bool, error) {
		nic.Spec.Prefixes = append(nic.Spec.Prefixes, networkingv1alpha1.PrefixSource{Value: &commonv1alpha1.IPPrefix{Prefix: route}})
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := <-done; !got.wrote || got.err != nil {
		t.Fatalf("the later change: written %v, error %v; want written with the route", got.wrote, got.err)
	}
	live := &networkingv1alpha1.NetworkInterface{}
	if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: name}, live); err != nil {
		t.Fatal(err)
	}
	if live.Labels["example.org/later"] != "1" || !slices.ContainsFunc(live.Spec.Prefixes, func(p networkingv1alpha1.PrefixSource) bool {
		return p.Value != nil && p.Value.Prefix == route
	}) {
		t.Errorf("labels %v, prefixes %v; want the later label and the route", live.Labels, live.Spec.Prefixes)
	}
	if patches := nicPatches(); patches != 1 {
		t.Errorf("%d patches, want 1: the later change with the route", patches)
	}

	stack.IronCoreProxy.Reset()
	c.UpdateNetworkInterfaceLater(ctx, name, 10*time.Millisecond, label("example.org/alone"), report)
	select {
	case got := <-done:
		if !got.wrote || got.err != nil {
			t.Fatalf("the later change alone: written %v, error %v; want written", got.wrote, got.err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a later change with nothing to go with was not written within a minute")
	}
	if patches := nicPatches(); patches != 1 {
		t.Errorf("%d patches, want 1: the later change on its own", patches)
	}
}

// TestARiderGoesOnlyWithOtherWrites: a change that rides along is written with another change
// of the NetworkInterface, in its patch, and never causes a write of its own.
func TestARiderGoesOnlyWithOtherWrites(t *testing.T) {
	ctx, c := stack.StartIronCoreClientForTest(t, nil)
	machine := stack.CreateMachineForTest(t, "rider", testenv.MachineOptions{Unschedulable: true})
	name := testenv.NetworkInterfaceName(machine.Name)
	waitCached(t, ctx, "the NetworkInterface", c.NetworkInterface, name)
	c.RideAlong(func(_, nic *networkingv1alpha1.NetworkInterface) bool {
		if nic.Labels["example.org/rider"] == "1" {
			return false
		}
		if nic.Labels == nil {
			nic.Labels = map[string]string{}
		}
		nic.Labels["example.org/rider"] = "1"
		return true
	})
	stack.IronCoreProxy.Reset()
	if err := c.UpdateNetworkInterface(ctx, name, false, func(*networkingv1alpha1.NetworkInterface) (bool, error) { return false, nil }); err != nil {
		t.Fatal(err)
	}
	if patches := nicPatches(); patches != 0 {
		t.Fatalf("%d patches for a change that changed nothing, want none: the rider alone is no write", patches)
	}
	if err := c.UpdateNetworkInterface(ctx, name, false, func(nic *networkingv1alpha1.NetworkInterface) (bool, error) {
		if nic.Labels == nil {
			nic.Labels = map[string]string{}
		}
		nic.Labels["example.org/own"] = "1"
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	live := &networkingv1alpha1.NetworkInterface{}
	if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: name}, live); err != nil {
		t.Fatal(err)
	}
	if live.Labels["example.org/own"] != "1" || live.Labels["example.org/rider"] != "1" {
		t.Errorf("labels %v, want the change and its rider", live.Labels)
	}
	if patches := nicPatches(); patches != 1 {
		t.Errorf("%d patches, want 1: the change with its rider", patches)
	}
}

// TestANetworkInterfaceWriteTakesOneToken: each batch of changes to a NetworkInterface costs
// exactly one token of the rate limiter; none is spent on finding the queue empty after a
// write, which would halve the rate of Node writes in a burst.
func TestANetworkInterfaceWriteTakesOneToken(t *testing.T) {
	limiter := &countingLimiter{}
	ctx, c := stack.StartIronCoreClientForTest(t, limiter)
	machine := stack.CreateMachineForTest(t, "one-token", testenv.MachineOptions{Unschedulable: true})
	name := testenv.NetworkInterfaceName(machine.Name)
	waitCached(t, ctx, "the NetworkInterface", c.NetworkInterface, name)
	for i, value := range []string{"a", "b", "c"} {
		before := limiter.taken()
		err := c.UpdateNetworkInterface(ctx, name, false, func(nic *networkingv1alpha1.NetworkInterface) (bool, error) {
			if nic.Labels == nil {
				nic.Labels = map[string]string{}
			}
			nic.Labels["example.org/token"] = value
			return true, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// A no-op change after it: whether it joins the writer's loop or starts a new one, it
		// is one more batch.
		if err := c.UpdateNetworkInterface(ctx, name, false, func(*networkingv1alpha1.NetworkInterface) (bool, error) { return false, nil }); err != nil {
			t.Fatal(err)
		}
		if spent := limiter.taken() - before; spent != 2 {
			t.Errorf("write %d and a no-op after it took %d tokens, want 2 (one each)", i+1, spent)
		}
	}
}

// TestAChangeMetByAStaleReadIsWrittenAnew: a change computed on a cached NetworkInterface that
// another writer changed since (the cache's watch held back) fails the patch's test, goes back
// on the queue and is computed anew on the object read from the API server: both writers'
// changes are kept, in two patches.
func TestAChangeMetByAStaleReadIsWrittenAnew(t *testing.T) {
	ctx, c := stack.StartIronCoreClientForTest(t, nil)
	machine := stack.CreateMachineForTest(t, "stale-read", testenv.MachineOptions{Unschedulable: true})
	name := testenv.NetworkInterfaceName(machine.Name)
	waitCached(t, ctx, "the NetworkInterface", c.NetworkInterface, name)
	release := stack.IronCoreProxy.HoldWatches("networkinterfaces.networking.ironcore.dev")
	t.Cleanup(release)
	const key = "example.org/appended"
	stack.Relabel(t, &networkingv1alpha1.NetworkInterface{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: name}}, map[string]string{key: "theirs"})
	stack.IronCoreProxy.Reset()
	err := c.UpdateNetworkInterface(ctx, name, false, func(nic *networkingv1alpha1.NetworkInterface) (bool, error) {
		if nic.Labels == nil {
			nic.Labels = map[string]string{}
		}
		nic.Labels[key] += ".mine"
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	live := &networkingv1alpha1.NetworkInterface{}
	if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: name}, live); err != nil {
		t.Fatal(err)
	}
	if got := live.Labels[key]; got != "theirs.mine" {
		t.Errorf("%s=%q, want %q: the change computed anew on the other writer's", key, got, "theirs.mine")
	}
	if patches := nicPatches(); patches != 2 {
		t.Errorf("%d patches, want 2: one failing on the stale read, one on the object read afresh", patches)
	}
}

// TestNetworkInterfaceWritesAreForgottenOnceTheCacheShowsThem: the writer's record of its last
// write of a NetworkInterface is dropped when the cache shows the write, also when the cache's
// event for it comes before the write is recorded (as it does for some of several), so that the
// records do not grow with the NetworkInterfaces written.
func TestNetworkInterfaceWritesAreForgottenOnceTheCacheShowsThem(t *testing.T) {
	ctx, c := stack.StartIronCoreClientForTest(t, nil)
	var names []string
	for i := range 5 {
		nic := &networkingv1alpha1.NetworkInterface{
			ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: fmt.Sprintf("forget-write-%d", i)},
			Spec: networkingv1alpha1.NetworkInterfaceSpec{
				NetworkRef: corev1.LocalObjectReference{Name: stack.Network},
				IPs:        []networkingv1alpha1.IPSource{{Value: commonv1alpha1.MustParseNewIP(fmt.Sprintf("10.99.0.%d", i+1))}},
			},
		}
		if err := stack.IronCore.Client.Create(ctx, nic); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = stack.IronCore.Client.Delete(context.Background(), nic) })
		names = append(names, nic.Name)
	}
	testenv.Await(t, ctx, time.Minute, "the NetworkInterfaces in the cache", func(ctx context.Context) error {
		for _, name := range names {
			if _, err := c.NetworkInterface(ctx, name); err != nil {
				return err
			}
		}
		return nil
	})
	for _, name := range names {
		nic := &networkingv1alpha1.NetworkInterface{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: name}}
		if err := c.SetLabel(ctx, nic, "example.org/forget", "1"); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Await(t, ctx, time.Minute, "the writes forgotten", func(context.Context) error {
		if n := c.NetworkInterfaceWritesKnown(); n != 0 {
			return fmt.Errorf("%d writes remembered", n)
		}
		return nil
	})
}

// nicPatches counts the patches of NetworkInterfaces the IronCore proxy passed on since its
// last reset.
func nicPatches() int {
	patches := 0
	for _, count := range stack.IronCoreProxy.Counts() {
		if count.Resource == "networkinterfaces.networking.ironcore.dev" && count.Verb == "patch" {
			patches += count.N
		}
	}
	return patches
}
