package ironcore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// TestReadOnlyReadersShareTheCachesObjects: the read-only readers return the cache's own
// objects, the same on every read, with what the copying readers return.
func TestReadOnlyReadersShareTheCachesObjects(t *testing.T) {
	ctx, client := stack.StartIronCoreClientForTest(t, nil)
	const name = "read-only"
	machine := stack.CreateMachineForTest(t, name, testenv.MachineOptions{})
	nicName := testenv.NetworkInterfaceName(name)
	// Settled: the simulator writes nothing more to either, so two reads see one version.
	testenv.Await(t, ctx, time.Minute, "the cache to show the Machine running and its NetworkInterface available", func(ctx context.Context) error {
		machine, err := client.Machine(ctx, name)
		if err != nil {
			return err
		}
		if machine.Status.State != computev1alpha1.MachineStateRunning || len(machine.Status.NetworkInterfaces) == 0 ||
			machine.Status.NetworkInterfaces[0].State != computev1alpha1.NetworkInterfaceStateAttached {
			return errors.New("the Machine is not running with its NetworkInterface attached")
		}
		nic, err := client.NetworkInterface(ctx, nicName)
		if err != nil {
			return err
		}
		if nic.Status.State != networkingv1alpha1.NetworkInterfaceStateAvailable || len(nic.Status.IPs) == 0 {
			return errors.New("the NetworkInterface is not available")
		}
		return nil
	})

	first, err := client.ReadOnlyMachine(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	second, err := client.ReadOnlyMachine(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if first != second {
		t.Error("two reads of the same Machine returned two objects: the reader copies")
	}
	if first.UID != machine.UID {
		t.Errorf("read Machine UID %s, want %s", first.UID, machine.UID)
	}
	nic, err := client.ReadOnlyNetworkInterface(ctx, nicName)
	if err != nil {
		t.Fatal(err)
	}
	again, err := client.ReadOnlyNetworkInterface(ctx, nicName)
	if err != nil {
		t.Fatal(err)
	}
	copied, err := client.NetworkInterface(ctx, nicName)
	if err != nil {
		t.Fatal(err)
	}
	if nic != again || nic.UID != copied.UID || nic.ResourceVersion != copied.ResourceVersion {
		t.Errorf("read-only NetworkInterface %p (%s, %s) and %p, copy (%s, %s)", nic, nic.UID, nic.ResourceVersion, again, copied.UID, copied.ResourceVersion)
	}
	if _, err := client.ReadOnlyMachine(ctx, "no-such-machine"); !errors.Is(err, ironcore.ErrNotFound) {
		t.Errorf("reading a missing Machine: %v, want ErrNotFound", err)
	}
}
