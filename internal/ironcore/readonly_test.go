package ironcore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// TestReadOnlyReadersShareTheCachesObjects: the read-only readers return the cache's own
// objects, the same on every read, with what the copying readers return.
func TestReadOnlyReadersShareTheCachesObjects(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client, err := stack.StartIronCoreClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const name = "read-only"
	machine, err := stack.CreateMachine(ctx, name, testenv.MachineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stack.IronCore.Client.Delete(context.Background(), machine) })
	nicName := testenv.NetworkInterfaceName(name)
	if err := testenv.WaitFor(ctx, time.Minute, "the cache to show the Machine and its NetworkInterface", func(ctx context.Context) error {
		if _, err := client.Machine(ctx, name); err != nil {
			return err
		}
		_, err := client.NetworkInterface(ctx, nicName)
		return err
	}); err != nil {
		t.Fatal(err)
	}

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
