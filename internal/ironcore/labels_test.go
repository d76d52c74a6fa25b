package ironcore_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// TestAddLabelOnAStaleObject gives AddLabel an object whose labels are not those on the API
// server, as a lagging cache does: the label must be added all the same, and another
// cluster's value must never be overwritten.
func TestAddLabelOnAStaleObject(t *testing.T) {
	ctx, c := stack.StartIronCoreClientForTest(t, nil)
	const other = "example.org/other"
	for i, tc := range []struct {
		name string
		// stale are the labels AddLabel is given, server those on the API server.
		stale, server map[string]string
		wantAdded     bool
		wantConflict  bool
		want          map[string]string
	}{{
		name:      "no labels read, some on the server",
		server:    map[string]string{other: "x"},
		wantAdded: true,
		want:      map[string]string{other: "x", keys.LabelCluster: stack.ClusterName},
	}, {
		name:      "labels read, none on the server",
		stale:     map[string]string{other: "x"},
		wantAdded: true,
		want:      map[string]string{keys.LabelCluster: stack.ClusterName},
	}, {
		name:         "no labels read, another cluster's on the server",
		server:       map[string]string{keys.LabelCluster: "another"},
		wantConflict: true,
		want:         map[string]string{keys.LabelCluster: "another"},
	}, {
		name:         "other labels read, another cluster's on the server",
		stale:        map[string]string{other: "x"},
		server:       map[string]string{other: "x", keys.LabelCluster: "another"},
		wantConflict: true,
		want:         map[string]string{other: "x", keys.LabelCluster: "another"},
	}, {
		name:   "no labels read, this cluster's on the server",
		server: map[string]string{keys.LabelCluster: stack.ClusterName},
		want:   map[string]string{keys.LabelCluster: stack.ClusterName},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			machine := staleMachine(t, fmt.Sprintf("stale-%d", i), tc.stale, tc.server)
			added, err := c.AddLabel(ctx, machine, keys.LabelCluster, stack.ClusterName)
			switch {
			case tc.wantConflict && !errors.Is(err, ironcore.ErrLabelConflict):
				t.Errorf("AddLabel = %v, %v; want a label conflict", added, err)
			case !tc.wantConflict && (err != nil || added != tc.wantAdded):
				t.Errorf("AddLabel = %v, %v; want %v, nil", added, err, tc.wantAdded)
			}
			live := &computev1alpha1.Machine{}
			if err := stack.IronCore.Client.Get(ctx, client.ObjectKeyFromObject(machine), live); err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(live.Labels, tc.want) {
				t.Errorf("labels %v, want %v", live.Labels, tc.want)
			}
		})
	}
}

// staleMachine creates a Machine with the server labels and returns it as if read when it had
// the stale labels.
func staleMachine(t *testing.T, name string, stale, server map[string]string) *computev1alpha1.Machine {
	t.Helper()
	ctx := context.Background()
	machine := stack.CreateMachineForTest(t, name, testenv.MachineOptions{Unschedulable: true})
	read := machine.DeepCopy()
	read.Labels = stale
	if server != nil {
		base := machine.DeepCopy()
		machine.Labels = server
		if err := stack.IronCore.Client.Patch(ctx, machine, client.MergeFrom(base)); err != nil {
			t.Fatal(err)
		}
	}
	return read
}

// TestAddLabelAgainOnACopyOlderThanItsWrite asks AddLabel again for a label it has just
// written, on a copy of the object read before that write, as a cache that has not caught up
// (its watch held back) gives it: the label is there, and no request is made (a patch testing
// that the label is absent would be refused). A copy newer than the write, without the label,
// gets it again.
func TestAddLabelAgainOnACopyOlderThanItsWrite(t *testing.T) {
	ctx, c := stack.StartIronCoreClientForTest(t, nil)
	old := staleMachine(t, "relabel", nil, nil)
	waitCached(t, ctx, "the Machine", c.Machine, old.Name)
	// Held behind: once the cache shows the write, the write is forgotten.
	release := stack.IronCoreProxy.HoldWatches("machines.compute.ironcore.dev")
	t.Cleanup(release)
	if added, err := c.AddLabel(ctx, old.DeepCopy(), keys.LabelCluster, stack.ClusterName); err != nil || !added {
		t.Fatalf("AddLabel = %v, %v; want true, nil", added, err)
	}
	stack.IronCoreProxy.Reset()
	if added, err := c.AddLabel(ctx, old.DeepCopy(), keys.LabelCluster, stack.ClusterName); err != nil || added {
		t.Fatalf("AddLabel on the copy older than its write = %v, %v; want false, nil", added, err)
	}
	if counts := stack.IronCoreProxy.Counts(); len(counts) != 0 {
		t.Errorf("AddLabel on the copy older than its write made requests: %v", counts)
	}
	release()

	live := &computev1alpha1.Machine{}
	if err := stack.IronCore.Client.Get(ctx, client.ObjectKeyFromObject(old), live); err != nil {
		t.Fatal(err)
	}
	base := live.DeepCopy()
	live.Labels = nil
	if err := stack.IronCore.Client.Patch(ctx, live, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	if added, err := c.AddLabel(ctx, live, keys.LabelCluster, stack.ClusterName); err != nil || !added {
		t.Fatalf("AddLabel on a newer copy without the label = %v, %v; want true, nil", added, err)
	}
}

// TestLabelWritesAreForgottenOnceTheCacheShowsThem: AddLabel's record of its write to a Machine
// is dropped when the cache shows the write, though AddLabel is not asked about the Machine
// again (its Node went away, say): when the cache's event for it comes before the write is
// recorded (as it does for some of several), and when it comes later (the watch held back), so
// that the records do not grow with the Machines labelled.
func TestLabelWritesAreForgottenOnceTheCacheShowsThem(t *testing.T) {
	ctx, c := stack.StartIronCoreClientForTest(t, nil)
	for i := range 5 {
		machine := staleMachine(t, fmt.Sprintf("forget-label-%d", i), nil, nil)
		if added, err := c.AddLabel(ctx, machine, keys.LabelCluster, stack.ClusterName); err != nil || !added {
			t.Fatalf("AddLabel = %v, %v; want true, nil", added, err)
		}
	}
	// One more, written while the cache is behind: its watch brings the write later.
	machine := staleMachine(t, "forget-label-behind", nil, nil)
	waitCached(t, ctx, "the Machine", c.Machine, machine.Name)
	release := stack.IronCoreProxy.HoldWatches("machines.compute.ironcore.dev")
	t.Cleanup(release)
	if added, err := c.AddLabel(ctx, machine, keys.LabelCluster, stack.ClusterName); err != nil || !added {
		t.Fatalf("AddLabel = %v, %v; want true, nil", added, err)
	}
	if n := c.LabelWritesKnown(); n == 0 {
		t.Fatal("the write is forgotten while the cache does not show it")
	}
	release()
	testenv.Await(t, ctx, time.Minute, "the label writes forgotten", func(context.Context) error {
		if n := c.LabelWritesKnown(); n != 0 {
			return fmt.Errorf("%d writes remembered", n)
		}
		return nil
	})
}
