package e2e

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// TestNodesCarryTheirLabelsFromIronCore runs the CCM binary with nodeLabelsFromMachine: a
// Node is initialized with its Machine's allowed labels already on it, and they follow the
// Machine afterwards, while a label the Node's owner set stays.
func TestNodesCarryTheirLabelsFromIronCore(t *testing.T) {
	cloudConfig, err := stack.WriteCloudConfig("node-labels", "nodeLabelsFromMachine: [e2e-team, e2e.example.com/*]\n")
	if err != nil {
		t.Fatal(err)
	}
	machine := runningMachine(t, "labelled-1", testenv.MachineOptions{Pool: "pool-b"})
	stack.Relabel(t, machine, map[string]string{"e2e-team": "payments", "e2e.example.com/owner": "ann", "e2e-secret": "x"})
	// First without the controller that keeps the labels in sync: initialization alone sets them.
	// The CCM starts after the relabelling, so that its cache has it, however slow its watch.
	initializer := startCCMWithoutCrashCheck(t, "ccm-node-labels-init", "--cloud-config="+cloudConfig, "--controllers=*,-ironcore-node-labels")
	createNode(t, "labelled-1", testenv.NodeOptions{Labels: map[string]string{"e2e-by-hand": "mine"}})

	node := waitForNode(t, "labelled-1", "the Node to be initialized", initialized)
	for key, want := range map[string]string{"e2e-team": "payments", "e2e.example.com/owner": "ann", keys.LabelMachinePool: "pool-b", "e2e-by-hand": "mine"} {
		if node.Labels[key] != want {
			t.Errorf("label %s=%q at initialization, want %q", key, node.Labels[key], want)
		}
	}
	if _, copied := node.Labels["e2e-secret"]; copied {
		t.Error("a label the allow-list does not name was copied")
	}

	if err := initializer.Stop(); err != nil {
		t.Fatal(err)
	}
	startCCM(t, "ccm-node-labels", "--cloud-config="+cloudConfig)
	stack.Relabel(t, machine, map[string]string{"e2e-team": "risk", "e2e.example.com/owner": ""})
	waitForNode(t, "labelled-1", "the Node's labels to follow the Machine", func(node *corev1.Node) error {
		_, owner := node.Labels["e2e.example.com/owner"]
		if node.Labels["e2e-team"] != "risk" || owner || node.Labels["e2e-by-hand"] != "mine" {
			return fmt.Errorf("labels %v", node.Labels)
		}
		return nil
	})
}
