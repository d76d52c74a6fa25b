package clusterlabel_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/clusterlabel"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/providerid"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

var stack *testenv.Stack

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, &stack))
}

// start runs the controller on real informers and the IronCore cache, for a CCM that routes no
// pod CIDRs; its events go to the returned recorder.
func start(t *testing.T) *record.FakeRecorder {
	t.Helper()
	return startRouting(t, "")
}

// startRouting is start for a CCM that routes the Nodes' pod CIDRs on routedNetwork.
func startRouting(t *testing.T, routedNetwork string) *record.FakeRecorder {
	t.Helper()
	recorder := record.NewFakeRecorder(100)
	stack.RunControllerForTest(t, stack.TargetClientset, func(ironcoreClient *ironcore.Client, factory informers.SharedInformerFactory) (testenv.Controller, error) {
		return clusterlabel.New(ironcoreClient, stack.ClusterName, routedNetwork, factory.Core().V1().Nodes(), recorder)
	})
	return recorder
}

// machineWithNode creates a Machine and, once its NetworkInterface exists, the Node a kubelet
// with --provider-id registers for it; label, if not empty, is put on the Machine before.
func machineWithNode(t *testing.T, name, label string, podCIDRs ...string) {
	t.Helper()
	ctx := context.Background()
	machine, err := stack.CreateMachine(ctx, name, testenv.MachineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if label != "" {
		stack.Relabel(t, machine, map[string]string{keys.LabelCluster: label})
	}
	nic := &networkingv1alpha1.NetworkInterface{}
	if err := testenv.WaitFor(ctx, time.Minute, "the Machine's NetworkInterface", func(ctx context.Context) error {
		return stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: testenv.NetworkInterfaceName(name)}, nic)
	}); err != nil {
		t.Fatal(err)
	}
	id := providerid.ID{Namespace: stack.Namespace, Machine: name}
	if _, err := stack.CreateNode(ctx, name, testenv.NodeOptions{ProviderID: id.String(), PodCIDRs: podCIDRs}); err != nil {
		t.Fatal(err)
	}
}

// clusterLabelOf reads the cluster label of the named IronCore object from the API server.
func clusterLabelOf(ctx context.Context, obj client.Object, name string) (string, error) {
	if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: name}, obj); err != nil {
		return "", err
	}
	return obj.GetLabels()[keys.LabelCluster], nil
}

func TestTheMachineAndNetworkInterfaceOfANodeGetTheClusterLabel(t *testing.T) {
	start(t)
	machineWithNode(t, "label-a", "")
	if err := testenv.WaitFor(context.Background(), time.Minute, "the cluster label on the Machine and its NetworkInterface", func(ctx context.Context) error {
		for _, object := range []struct {
			obj  client.Object
			name string
		}{{&computev1alpha1.Machine{}, "label-a"}, {&networkingv1alpha1.NetworkInterface{}, testenv.NetworkInterfaceName("label-a")}} {
			label, err := clusterLabelOf(ctx, object.obj, object.name)
			if err != nil {
				return err
			}
			if label != stack.ClusterName {
				return fmt.Errorf("%s has cluster label %q, want %q", object.name, label, stack.ClusterName)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// A Machine labelled for another cluster keeps that label, and its Node gets a Warning; the
// NetworkInterface, labelled for no cluster, is still this cluster's.
func TestAMachineOfAnotherClusterKeepsItsLabel(t *testing.T) {
	recorder := start(t)
	machineWithNode(t, "label-b", "another-cluster")
	testenv.AwaitEvent(t, recorder, time.Minute, clusterlabel.ReasonLabelConflict)
	ctx := context.Background()
	if err := testenv.WaitFor(ctx, time.Minute, "the cluster label on the NetworkInterface", func(ctx context.Context) error {
		label, err := clusterLabelOf(ctx, &networkingv1alpha1.NetworkInterface{}, testenv.NetworkInterfaceName("label-b"))
		if err == nil && label != stack.ClusterName {
			err = fmt.Errorf("cluster label %q, want %q", label, stack.ClusterName)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	label, err := clusterLabelOf(ctx, &computev1alpha1.Machine{}, "label-b")
	if err != nil {
		t.Fatal(err)
	}
	if label != "another-cluster" {
		t.Fatalf("the Machine's cluster label is %q, want it left as %q", label, "another-cluster")
	}
}

// Where the CCM routes pod CIDRs, a new Node's NetworkInterface is left to the write of its
// route, which labels it too: the Machine is labelled, the NetworkInterface not.
func TestANewNodesNetworkInterfaceIsLeftToItsRoute(t *testing.T) {
	startRouting(t, stack.Network)
	machineWithNode(t, "label-c", "", "10.244.40.0/24")
	ctx := context.Background()
	if err := testenv.WaitFor(ctx, time.Minute, "the cluster label on the Machine", func(ctx context.Context) error {
		label, err := clusterLabelOf(ctx, &computev1alpha1.Machine{}, "label-c")
		if err == nil && label != stack.ClusterName {
			err = fmt.Errorf("cluster label %q", label)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	label, err := clusterLabelOf(ctx, &networkingv1alpha1.NetworkInterface{}, testenv.NetworkInterfaceName("label-c"))
	if err != nil {
		t.Fatal(err)
	}
	if label != "" {
		t.Fatalf("the NetworkInterface was labelled %q before its route was written", label)
	}
}
