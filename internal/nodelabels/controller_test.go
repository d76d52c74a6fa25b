package nodelabels_test

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"testing"
	"time"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/nodelabels"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/providerid"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

var stack *testenv.Stack

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, &stack))
}

// TestNodesKeepTheirLabelsFromIronCore runs the controller on real informers and the IronCore
// cache: a Node gets the allowed labels of its Machine and its pool's topology labels; they
// follow the Machine and the pool; one the Machine loses goes; a label a user set on the
// Node with another key stays.
func TestNodesKeepTheirLabelsFromIronCore(t *testing.T) {
	allow, err := nodelabels.ParseAllowList([]string{"team", "example.com/*"})
	if err != nil {
		t.Fatal(err)
	}
	stack.RunControllerForTest(t, stack.TargetClientset, func(ironcoreClient *ironcore.Client, factory informers.SharedInformerFactory) (testenv.Controller, error) {
		return nodelabels.New(ironcoreClient, stack.TargetClientset, allow, factory.Core().V1().Nodes())
	})

	ctx := context.Background()
	pool := &computev1alpha1.MachinePool{ObjectMeta: metav1.ObjectMeta{Name: "pool-a"}}
	stack.Relabel(t, pool, map[string]string{nodelabels.TopologyPrefix + "rack": "r1"})
	machine, err := stack.CreateMachine(ctx, "nl-a", testenv.MachineOptions{Pool: "pool-a"})
	if err != nil {
		t.Fatal(err)
	}
	stack.Relabel(t, machine, map[string]string{"team": "payments", "example.com/owner": "ann", "secret": "x"})
	id := providerid.ID{Namespace: stack.Namespace, Machine: "nl-a"}
	if _, err := stack.CreateNode(ctx, "nl-a", testenv.NodeOptions{ProviderID: id.String(), Labels: map[string]string{"user-set": "mine", "by-hand": "mine"}}); err != nil {
		t.Fatal(err)
	}
	waitForLabels(t, "nl-a", map[string]string{
		"team": "payments", "example.com/owner": "ann", nodelabels.TopologyPrefix + "rack": "r1", keys.LabelMachinePool: "pool-a",
		"user-set": "mine", "by-hand": "mine",
	})

	// The Machine's labels change, one goes: the Node follows; the user's labels stay.
	stack.Relabel(t, machine, map[string]string{"team": "risk", "example.com/owner": "", "secret": "x"})
	waitForLabels(t, "nl-a", map[string]string{
		"team": "risk", nodelabels.TopologyPrefix + "rack": "r1", keys.LabelMachinePool: "pool-a",
		"user-set": "mine", "by-hand": "mine",
	})

	// The pool's topology changes.
	stack.Relabel(t, pool, map[string]string{nodelabels.TopologyPrefix + "rack": "r2"})
	waitForLabels(t, "nl-a", map[string]string{
		"team": "risk", nodelabels.TopologyPrefix + "rack": "r2", keys.LabelMachinePool: "pool-a",
		"user-set": "mine", "by-hand": "mine",
	})
}

// waitForLabels waits until the Node's labels, other than the ones its registration and the
// API server set, are exactly want.
func waitForLabels(t *testing.T, name string, want map[string]string) {
	t.Helper()
	err := testenv.WaitFor(context.Background(), time.Minute, "the labels of Node "+name, func(ctx context.Context) error {
		node, err := stack.TargetClientset.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		got := map[string]string{}
		for key, value := range node.Labels {
			if _, registered := registrationLabels[key]; !registered {
				got[key] = value
			}
		}
		if !reflect.DeepEqual(got, want) {
			return fmt.Errorf("labels %v", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// registrationLabels are the labels testenv.CreateNode sets as a kubelet does.
var registrationLabels = map[string]bool{"kubernetes.io/hostname": true, "kubernetes.io/os": true, "kubernetes.io/arch": true}
