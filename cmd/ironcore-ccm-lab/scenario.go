package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	ipamv1alpha1 "github.com/ironcore-dev/ironcore/api/ipam/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/bench"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// convergeTimeout bounds every wait of the scenario.
const convergeTimeout = 2 * time.Minute

// The demo cluster is dual-stack, its pod CIDRs from IronCore's IPAM: each worker gets a /24
// and a /64 of these parent Prefixes, and the route controller covers them.
const (
	podParentV4, podParentV4CIDR = "pods-v4", "10.244.0.0/16"
	podParentV6, podParentV6CIDR = "pods-v6", "fd00:244::/56"
	clusterCIDR                  = podParentV4CIDR + "," + podParentV6CIDR
)

// podCIDRConfig turns pod CIDR allocation from IronCore on, dual-stack.
const podCIDRConfig = "podCIDRParentPrefix: " + podParentV4 + "\nipv6PodCIDRParentPrefix: " + podParentV6 + "\n"

// worker is one Machine and the Node that registers for it.
type worker struct {
	name    string
	options testenv.MachineOptions
}

func demoWorkers() []worker {
	return []worker{
		{name: "worker-a", options: testenv.MachineOptions{Pool: "pool-a", VirtualIP: true}},
		{name: "worker-b", options: testenv.MachineOptions{Pool: "pool-b", DualStack: true}},
		{name: "worker-c", options: testenv.MachineOptions{Pool: "pool-a"}},
	}
}

// runScenario runs the demo (or, keepRunning, the lab). commandStarted is when the make target
// that runs it started, for the total time; zero if unknown.
func runScenario(ctx context.Context, latency time.Duration, keepRunning bool, commandStarted time.Time, faultRate float64, seed uint64) error {
	started := time.Now()
	fmt.Println("== IronCore cloud-controller-manager demo ==")
	stack, err := testenv.Start(ctx, testenv.Options{Progress: os.Stdout, SimulatorLatency: latency, Purpose: purposeOf(keepRunning)})
	if err != nil {
		return err
	}
	defer func() {
		if err := stack.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping the stack: %v\n", err)
		}
	}()
	fmt.Printf("simulated IronCore providers answer after %s\n", latency)

	fmt.Println("building the CCM binary...")
	binary, err := testenv.BuildCCM(ctx, stack.Dir, false)
	if err != nil {
		return err
	}
	for name, cidr := range map[string]string{podParentV4: podParentV4CIDR, podParentV6: podParentV6CIDR} {
		if _, err := stack.CreateRootPrefix(ctx, name, cidr, nil); err != nil {
			return err
		}
	}
	cloudConfig, err := stack.WriteCloudConfig("demo", podCIDRConfig)
	if err != nil {
		return err
	}
	ccmArgs := []string{"--cloud-config=" + cloudConfig, "--configure-cloud-routes=true", "--cluster-cidr=" + clusterCIDR}
	ccm, _, err := stack.StartCCM(binary, "ironcore-cloud-controller-manager", ccmArgs...)
	if err != nil {
		return err
	}
	defer func() { _ = ccm.Stop() }()
	fmt.Printf("CCM running (pid %d), log: %s\n\n", ccm.Pid(), ccm.LogPath)
	stackStarted := time.Now()

	if err := initializeNodes(ctx, stack); err != nil {
		return fmt.Errorf("%w (CCM log: %s)", err, ccm.LogPath)
	}
	if err := loadBalancers(ctx, stack); err != nil {
		return fmt.Errorf("%w (CCM log: %s)", err, ccm.LogPath)
	}
	if err := keepAnAddress(ctx, stack); err != nil {
		return fmt.Errorf("%w (CCM log: %s)", err, ccm.LogPath)
	}
	if err := shutdownAndDeletion(ctx, stack); err != nil {
		return fmt.Errorf("%w (CCM log: %s)", err, ccm.LogPath)
	}
	if err := previewSwitch(ctx, stack, binary, ccmArgs); err != nil {
		return err
	}
	fmt.Printf("\nDemo finished: the scenario took %s", time.Since(stackStarted).Round(100*time.Millisecond))
	if !commandStarted.IsZero() {
		// Downloads, builds and the stack's start included: what the user waited for.
		fmt.Printf(", everything since the command started %s", time.Since(commandStarted).Round(time.Second))
	} else {
		fmt.Printf(", everything since the program started %s", time.Since(started).Round(time.Second))
	}
	fmt.Println(".")
	if !keepRunning {
		return nil
	}
	printLabHelp(stack)
	if faultRate > 0 {
		ironcore, target := bench.Faults(faultRate)
		stack.IronCoreProxy.SetFaults(seed, ironcore...)
		stack.TargetProxy.SetFaults(seed+1, target...)
		fmt.Printf("Faults are on: IronCore fails %g of the CCM's requests (500s; 409s to writes, resets and 2 s delays at half that; hangs at a fiftieth), the target cluster's API %g.\n", faultRate, faultRate/5)
	}
	<-ctx.Done()
	fmt.Println("\nstopping the CCM and the stack...")
	return nil
}

// initializeNodes registers Machines and Nodes and shows how the CCM initialized them.
func initializeNodes(ctx context.Context, stack *testenv.Stack) error {
	workers := demoWorkers()
	fmt.Printf("Creating %d IronCore Machines (IronCore schedules them and allocates their addresses)...\n", len(workers))
	machinesCreated := time.Now()
	for _, w := range workers {
		if _, err := stack.CreateMachine(ctx, w.name, w.options); err != nil {
			return err
		}
	}
	if err := waitForRunningMachines(ctx, stack, workers); err != nil {
		return err
	}
	fmt.Printf("  all running after %s\n", time.Since(machinesCreated).Round(time.Millisecond))

	fmt.Println("Registering their Nodes, tainted uninitialized as kubelet --cloud-provider=external does...")
	registered := time.Now()
	initTimes := map[string]time.Duration{}
	for _, w := range workers {
		created := time.Now()
		if _, err := stack.CreateNode(ctx, w.name, testenv.NodeOptions{}); err != nil {
			return err
		}
		err := waitForNode(ctx, stack, w.name, "initialized", func(node *corev1.Node) error {
			if hasTaint(node, cloudproviderapi.TaintExternalCloudProvider) || len(node.Status.Addresses) == 0 {
				return errors.New("not initialized")
			}
			return nil
		})
		if err != nil {
			return err
		}
		initTimes[w.name] = time.Since(created)
	}
	if err := printNodes(ctx, stack); err != nil {
		return err
	}
	fmt.Print("Node creation to initialized:")
	for _, w := range workers {
		fmt.Printf(" %s %s", w.name, initTimes[w.name].Round(time.Millisecond))
	}
	fmt.Println()
	return routes(ctx, stack, registered)
}

// routes waits until every worker has pod CIDRs from IronCore, routed by the prefixes
// IronCore allocated on its NetworkInterface, and its network available, and shows them.
func routes(ctx context.Context, stack *testenv.Stack, since time.Time) error {
	fmt.Printf("\nPod CIDRs from IronCore's IPAM, dual-stack: the CCM adds an ephemeral prefix per family to each Node's NetworkInterface,\n"+
		"IronCore allocates it from %s (%s) or %s (%s), and the CCM sets spec.podCIDRs; the prefix routes the range...\n",
		podParentV4, podParentV4CIDR, podParentV6, podParentV6CIDR)
	type allocation struct{ podCIDRs, prefixes, literals []string }
	allocations := map[string]allocation{}
	err := testenv.WaitFor(ctx, convergeTimeout, "pod CIDRs from IronCore, routed", func(ctx context.Context) error {
		for _, w := range demoWorkers() {
			node, err := stack.TargetClientset.CoreV1().Nodes().Get(ctx, w.name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if len(node.Spec.PodCIDRs) != 2 || !networkAvailable(node) {
				return fmt.Errorf("node %s: pod CIDRs %v, network available %v", w.name, node.Spec.PodCIDRs, networkAvailable(node))
			}
			nic := &networkingv1alpha1.NetworkInterface{}
			if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: testenv.NetworkInterfaceName(w.name)}, nic); err != nil {
				return err
			}
			a := allocation{podCIDRs: node.Spec.PodCIDRs}
			for i, source := range nic.Spec.Prefixes {
				if source.Value != nil {
					a.literals = append(a.literals, source.Value.String())
					continue
				}
				name := networkingv1alpha1.NetworkInterfacePrefixIPAMPrefixName(nic.Name, i)
				prefix := &ipamv1alpha1.Prefix{}
				if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: name}, prefix); err != nil {
					return err
				}
				a.prefixes = append(a.prefixes, fmt.Sprintf("%s=%s", name, prefix.Spec.Prefix))
			}
			allocations[w.name] = a
		}
		return nil
	})
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tPOD CIDRS\tIRONCORE PREFIXES (EPHEMERAL, ROUTED)\tLITERAL PREFIXES")
	for _, worker := range demoWorkers() {
		a := allocations[worker.name]
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", worker.name, strings.Join(a.podCIDRs, ","), strings.Join(a.prefixes, " "), orNone(strings.Join(a.literals, ",")))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Printf("all allocated, routed without a second copy, networks available %s after the Nodes were registered\n", time.Since(since).Round(time.Millisecond))
	return nil
}

// networkAvailable tells whether the route controller cleared the Node's NetworkUnavailable.
func networkAvailable(node *corev1.Node) bool {
	for _, condition := range node.Status.Conditions {
		if condition.Type == corev1.NodeNetworkUnavailable {
			return condition.Status == corev1.ConditionFalse
		}
	}
	return false
}

// shutdownAndDeletion shuts one Machine down and deletes another.
func shutdownAndDeletion(ctx context.Context, stack *testenv.Stack) error {
	fmt.Println("\nPowering off Machine worker-b (its kubelet stops reporting, the Node goes NotReady)...")
	shutdownStarted := time.Now()
	if err := powerOff(ctx, stack, "worker-b"); err != nil {
		return err
	}
	if _, err := stack.SetNodeReady(ctx, "worker-b", corev1.ConditionFalse); err != nil {
		return err
	}
	err := waitForNode(ctx, stack, "worker-b", "tainted shut down", func(node *corev1.Node) error {
		if !hasTaint(node, "node.cloudprovider.kubernetes.io/shutdown") {
			return errors.New("no shutdown taint")
		}
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Printf("  Node worker-b tainted node.cloudprovider.kubernetes.io/shutdown after %s\n", time.Since(shutdownStarted).Round(time.Millisecond))
	webLB, err := loadBalancerOfService(ctx, stack, "shop", "web") // installed again there, keeping its address
	if err != nil {
		return err
	}
	routed, err := routedTo(ctx, stack, webLB, func(names []string) bool { return !slices.Contains(names, testenv.NetworkInterfaceName("worker-b")) })
	if err != nil {
		return err
	}
	fmt.Printf("  Service web no longer sends traffic to worker-b after %s (Node health: its Machine is shut down); routed to %s\n",
		time.Since(shutdownStarted).Round(time.Millisecond), routed)

	fmt.Println("Deleting Machine worker-c (the Node goes NotReady)...")
	deleteStarted := time.Now()
	machine := &computev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: "worker-c"}}
	if err := stack.IronCore.Client.Delete(ctx, machine); err != nil {
		return err
	}
	if _, err := stack.SetNodeReady(ctx, "worker-c", corev1.ConditionFalse); err != nil {
		return err
	}
	err = testenv.WaitFor(ctx, convergeTimeout, "Node worker-c to be deleted", func(ctx context.Context) error {
		_, err := stack.TargetClientset.CoreV1().Nodes().Get(ctx, "worker-c", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return errors.Join(err, errors.New("still there"))
	})
	if err != nil {
		return err
	}
	fmt.Printf("  Node worker-c deleted by the CCM after %s\n\n", time.Since(deleteStarted).Round(time.Millisecond))
	return printNodes(ctx, stack)
}

func waitForRunningMachines(ctx context.Context, stack *testenv.Stack, workers []worker) error {
	return testenv.WaitFor(ctx, convergeTimeout, "the Machines to run with addresses", func(ctx context.Context) error {
		for _, w := range workers {
			machine := &computev1alpha1.Machine{}
			if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: w.name}, machine); err != nil {
				return err
			}
			if machine.Status.State != computev1alpha1.MachineStateRunning {
				return fmt.Errorf("Machine %s is %q", w.name, machine.Status.State)
			}
			nic := &networkingv1alpha1.NetworkInterface{}
			if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: testenv.NetworkInterfaceName(w.name)}, nic); err != nil {
				return err
			}
			if len(nic.Status.IPs) == 0 {
				return fmt.Errorf("NetworkInterface of Machine %s has no IPs yet", w.name)
			}
		}
		return nil
	})
}

func waitForNode(ctx context.Context, stack *testenv.Stack, name, what string, check func(*corev1.Node) error) error {
	return testenv.WaitFor(ctx, convergeTimeout, "Node "+name+" "+what, func(ctx context.Context) error {
		node, err := stack.TargetClientset.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		return check(node)
	})
}

func powerOff(ctx context.Context, stack *testenv.Stack, name string) error {
	machine := &computev1alpha1.Machine{}
	if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: name}, machine); err != nil {
		return err
	}
	base := machine.DeepCopy()
	machine.Spec.Power = computev1alpha1.PowerOff
	return stack.IronCore.Client.Patch(ctx, machine, client.MergeFrom(base))
}

func hasTaint(node *corev1.Node, key string) bool {
	return slices.ContainsFunc(node.Spec.Taints, func(taint corev1.Taint) bool { return taint.Key == key })
}

func printNodes(ctx context.Context, stack *testenv.Stack) error {
	nodes, err := stack.TargetClientset.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	fmt.Println()
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tPROVIDER-ID\tTYPE\tZONE\tREGION\tADDRESSES\tTAINTS")
	for _, node := range nodes.Items {
		var addresses, taints []string
		for _, address := range node.Status.Addresses {
			addresses = append(addresses, string(address.Type)+"="+address.Address)
		}
		for _, taint := range node.Spec.Taints {
			taints = append(taints, taint.Key)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", node.Name, orNone(node.Spec.ProviderID),
			orNone(node.Labels[corev1.LabelInstanceTypeStable]), orNone(node.Labels[corev1.LabelTopologyZone]),
			orNone(node.Labels[corev1.LabelTopologyRegion]), orNone(strings.Join(addresses, " ")), orNone(strings.Join(taints, ",")))
	}
	return w.Flush()
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

func printLabHelp(stack *testenv.Stack) {
	fmt.Printf(`
The lab keeps running. Kubeconfigs:
  target cluster:  %s
  IronCore:        %s  (namespace %s)
  the CCM uses:    %s and %s

Try:
  kubectl --kubeconfig %[1]s get nodes -o wide
  kubectl --kubeconfig %[2]s get machines,networkinterfaces
  kubectl --kubeconfig %[2]s delete machine worker-a

Press Ctrl-C to stop everything.
`, stack.TargetAdminKubeconfig, stack.IronCoreAdminKubeconfig, stack.Namespace, stack.CCMTargetKubeconfig, stack.CCMIronCoreKubeconfig)
}

// purposeOf names the run to other runs: only one demo or lab runs at a time.
func purposeOf(keepRunning bool) string {
	if keepRunning {
		return "lab"
	}
	return "demo"
}
