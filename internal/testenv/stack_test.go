package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestStackPlaysIronCore checks that the stack does what the CCM's tests rely on: IronCore
// schedules a Machine, creates its NetworkInterface and allocates its addresses, the simulator
// attaches and reports them, and the garbage collector removes the interface with the Machine.
func TestStackPlaysIronCore(t *testing.T) {
	ctx := context.Background()
	stack := startForTest(t)
	c := stack.IronCore.Client

	machine, err := stack.CreateMachine(ctx, "smoke", MachineOptions{DualStack: true, VirtualIP: true})
	if err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(machine)
	nicKey := client.ObjectKey{Namespace: stack.Namespace, Name: NetworkInterfaceName(machine.Name)}
	err = WaitFor(ctx, time.Minute, "a running machine with an addressed interface", func(ctx context.Context) error {
		if err := c.Get(ctx, key, machine); err != nil {
			return err
		}
		if machine.Status.State != computev1alpha1.MachineStateRunning || machine.Spec.MachinePoolRef == nil {
			return fmt.Errorf("machine state %q, pool %v", machine.Status.State, machine.Spec.MachinePoolRef)
		}
		nic := &networkingv1alpha1.NetworkInterface{}
		if err := c.Get(ctx, nicKey, nic); err != nil {
			return err
		}
		if nic.Status.State != networkingv1alpha1.NetworkInterfaceStateAvailable || len(nic.Status.IPs) != 2 || nic.Status.VirtualIP == nil {
			return fmt.Errorf("interface status %+v", nic.Status)
		}
		if nic.Status.IPs[0].Family() != "IPv4" || nic.Status.IPs[1].Family() != "IPv6" {
			return fmt.Errorf("interface IPs %v", nic.Status.IPs)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	pool := &computev1alpha1.MachinePool{}
	if err := c.Get(ctx, client.ObjectKey{Name: machine.Spec.MachinePoolRef.Name}, pool); err != nil {
		t.Fatal(err)
	}
	if want := Pools()[pool.Name].Zone; pool.Labels[string(commonv1alpha1.TopologyLabelZone)] != want {
		t.Errorf("pool %s zone label = %q, want %q", pool.Name, pool.Labels[string(commonv1alpha1.TopologyLabelZone)], want)
	}

	if err := c.Delete(ctx, machine); err != nil {
		t.Fatal(err)
	}
	err = WaitFor(ctx, time.Minute, "the garbage collector to delete the interface", func(ctx context.Context) error {
		err := c.Get(ctx, nicKey, &networkingv1alpha1.NetworkInterface{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return errors.Join(err, errors.New("still there"))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// startForTest starts a stack of the test's own and stops it when the test ends.
func startForTest(t *testing.T) *Stack {
	t.Helper()
	stack, err := Start(context.Background(), Options{Progress: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stack.Stop(); err != nil {
			t.Error(err)
		}
	})
	return stack
}
