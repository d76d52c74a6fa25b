package provider_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	ipamv1alpha1 "github.com/ironcore-dev/ironcore/api/ipam/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudprovider "k8s.io/cloud-provider"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/config"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbrepair"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/podcidrs"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/pkg/provider"
)

// badInputNames numbers the objects the entries create, so that no two share a name.
var badInputNames atomic.Int64

func uniqueSuffix() int64 { return badInputNames.Add(1) }

var updateCatalogue = flag.Bool("update-catalogue", false, "write docs/reliability/bad-inputs.md from TestBadInputs")

// catalogue is the catalogue of bad inputs, docs/reliability/bad-inputs.md.
const catalogue = "../../docs/reliability/bad-inputs.md"

// badInput is one entry of the catalogue: what is wrong, what the user sees (every entry's
// check asserts this text), and what is kept (which the check asserts too).
type badInput struct {
	category, input string
	// answer is how the user learns of it: "exits at start", a Warning event reason, or the
	// error the framework logs and retries.
	answer string
	// message is (part of) the text the user sees.
	message string
	check   func(t *testing.T, in badInput)
}

// Categories, in the catalogue's order.
const (
	catCloudConfig = "cloud-config"
	catFlags       = "Flags and kubeconfig"
	catService     = "Service annotations and fields"
	catProviderID  = "Provider IDs"
	catIronCore    = "IronCore objects in odd states"
)

const (
	answerStart     = "The CCM exits at start with status 1 and this message; it has written nothing."
	answerNodeError = "The Node is not initialized (or not deleted); the framework logs this error and tries again."
)

func answerEvent(reason string) string {
	return fmt.Sprintf("Warning event `%s` on the Service, and the sync fails with the same message (retried with backoff).", reason)
}

// TestBadInputs runs every entry of the catalogue, and checks that the catalogue document is
// generated from this table (go test ./pkg/provider -run TestBadInputs -update-catalogue).
func TestBadInputs(t *testing.T) {
	t.Cleanup(func() { waitForBadInputObjectsGone(t) })
	entries := badInputs(t)
	for i, in := range entries {
		t.Run(fmt.Sprintf("%02d", i+1), func(t *testing.T) { in.check(t, in) })
	}
	if t.Failed() {
		return
	}
	rendered := renderCatalogue(entries)
	if *updateCatalogue {
		if err := os.MkdirAll(filepath.Dir(catalogue), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(catalogue, []byte(rendered), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if current, err := os.ReadFile(catalogue); err != nil || string(current) != rendered {
		t.Errorf("%s is not generated from this table (%v); run go test ./pkg/provider -run TestBadInputs -update-catalogue", catalogue, err)
	}
}

func badInputs(t *testing.T) []badInput {
	base := fmt.Sprintf("networkName: %s\nprefixName: %s\nipv6PrefixName: %s\nclusterName: %s\n",
		stack.Network, testenv.LoadBalancerPrefix, testenv.LoadBalancerPrefixV6, stack.ClusterName)
	cfg := func(input, content, message string) badInput {
		return badInput{category: catCloudConfig, input: input, answer: answerStart, message: message,
			check: func(t *testing.T, in badInput) { checkStart(t, in, content, nil, "") }}
	}
	flagged := func(input, message string, modify func(*config.Options), clusterFlag string) badInput {
		return badInput{category: catFlags, input: input, answer: answerStart, message: message,
			check: func(t *testing.T, in badInput) { checkStart(t, in, base, modify, clusterFlag) }}
	}
	kubeconfig := func(input, content, message string) badInput {
		return flagged(input, message, func(o *config.Options) { o.IronCoreKubeconfig = writeTemp(t, "kubeconfig", content) }, "")
	}
	service := func(input, reason, message string, modify func(*corev1.Service)) badInput {
		return badInput{category: catService, input: input, answer: answerEvent(reason), message: message,
			check: func(t *testing.T, in badInput) { checkService(t, in, reason, modify) }}
	}
	providerID := func(input, id, message string) badInput {
		return badInput{category: catProviderID, input: input, answer: answerNodeError, message: message,
			check: func(t *testing.T, in badInput) { checkNode(t, in, node("bad-id", id)) }}
	}
	machine := func(input, message string, create func(t *testing.T, name string)) badInput {
		return badInput{category: catIronCore, input: input, answer: answerNodeError, message: message,
			check: func(t *testing.T, in badInput) {
				name := fmt.Sprintf("odd-%d", uniqueSuffix())
				create(t, name)
				checkNode(t, in, node(name, providerIDOf(name)))
			}}
	}

	return []badInput{
		cfg("Not YAML", "networkName: [cluster-network\n", "not valid YAML"),
		cfg("A misspelt key", strings.Replace(base, "networkName", "netwrokName", 1), `unknown key "netwrokName" (did you mean "networkName"?)`),
		cfg("A key no version knows", base+"loadBalancerClass: fast\n", `unknown key "loadBalancerClass"`),
		cfg("A value of the wrong type", strings.Replace(base, "clusterName: "+stack.ClusterName, "clusterName: [a, b]", 1), `key "clusterName" must be a string`),
		cfg("No networkName", strings.Replace(base, "networkName: "+stack.Network+"\n", "", 1), "networkName is required"),
		cfg("networkName not an object name", strings.Replace(base, "networkName: "+stack.Network, "networkName: Cluster_Network", 1), `networkName "Cluster_Network" is not a valid object name`),
		cfg("prefixName not an object name", strings.Replace(base, "prefixName: "+testenv.LoadBalancerPrefix, "prefixName: Bad_Name", 1), `prefixName "Bad_Name" is not a valid object name`),
		cfg("No clusterName", strings.Replace(base, "clusterName: "+stack.ClusterName+"\n", "", 1), "clusterName is required"),
		cfg("clusterName not a label value", strings.Replace(base, "clusterName: "+stack.ClusterName, "clusterName: -lab-", 1), `clusterName "-lab-" is not a valid label value`),
		cfg("An empty cluster name alias", base+"clusterNameAliases: [\"\"]\n", "clusterNameAliases[0] is empty"),
		cfg("clusterName listed as its own alias", base+"clusterNameAliases: ["+stack.ClusterName+"]\n", "is clusterName itself"),
		cfg("Both a pod CIDR parent and parent labels", base+"podCIDRParentPrefix: pods\npodCIDRParentPrefixLabels: {a: b}\n", "podCIDRParentPrefix and podCIDRParentPrefixLabels are alternatives"),
		cfg("A pod CIDR size without a parent", base+"podCIDRMaskSize: 26\n", "podCIDRMaskSize is set without podCIDRParentPrefix or podCIDRParentPrefixLabels"),
		cfg("A reserved key in nodeLabelsFromMachine", base+"nodeLabelsFromMachine: [team, node-role.kubernetes.io/*]\n", `nodeLabelsFromMachine[1] "node-role.kubernetes.io/*": keys under kubernetes.io are reserved`),
		cfg("A pod CIDR size beyond the family", base+"podCIDRParentPrefix: "+testenv.NodePrefixV4+"\npodCIDRMaskSize: 40\n", "podCIDRMaskSize 40 is not a prefix length between 1 and 32"),
		cfg("Pod CIDR parent labels that are not labels", base+"podCIDRParentPrefixLabels: {\"bad key!\": x}\n", "podCIDRParentPrefixLabels:"),
		cfg("A Network that does not exist", strings.Replace(base, "networkName: "+stack.Network, "networkName: no-such-network", 1), "networkName: IronCore Network "+stack.Namespace+"/no-such-network: not found"),
		cfg("A prefixName that does not exist", strings.Replace(base, "prefixName: "+testenv.LoadBalancerPrefix, "prefixName: no-such-prefix", 1), "prefixName: IronCore Prefix "+stack.Namespace+"/no-such-prefix: not found"),
		cfg("An IPv6 Prefix as prefixName", strings.Replace(base, "prefixName: "+testenv.LoadBalancerPrefix, "prefixName: "+testenv.LoadBalancerPrefixV6, 1), "is IPv6, not IPv4"),
		cfg("A pod CIDR parent that does not exist", base+"podCIDRParentPrefix: no-such-parent\n", "podCIDRParentPrefix: IronCore Prefix "+stack.Namespace+"/no-such-parent"),
		cfg("A pod CIDR parent no larger than the pod CIDRs", base+"podCIDRParentPrefix: "+testenv.NodePrefixV4+"\npodCIDRMaskSize: 16\n", "is not larger than the pod CIDRs (/16, podCIDRMaskSize)"),
		cfg("No Prefix with the pod CIDR parent labels", base+"podCIDRParentPrefixLabels: {no-such: label}\n", "podCIDRParentPrefixLabels: no IPv4 Prefix labelled map[no-such:label]"),
		{category: catCloudConfig, input: "A cloud-config file that does not exist", answer: answerStart, message: "read cloud-config",
			check: func(t *testing.T, in badInput) {
				checkStartWith(t, in, filepath.Join(t.TempDir(), "missing.yaml"), nil, "")
			}},

		flagged("`--cluster-name` differs from clusterName", `cloud-config clusterName "lab" and --cluster-name "other" differ`, nil, "other"),
		flagged("`--ironcore-api-qps=0`", "--ironcore-api-qps must be positive, not 0", func(o *config.Options) { o.IronCoreQPS = 0 }, ""),
		flagged("`--ironcore-api-burst=0`", "--ironcore-api-burst must be at least 1, not 0", func(o *config.Options) { o.IronCoreBurst = 0 }, ""),
		flagged("`--orphan-load-balancer-cleanup=maybe`", `--orphan-load-balancer-cleanup must be delete, report or off, not "maybe"`, func(o *config.Options) { o.OrphanCleanup = "maybe" }, ""),
		flagged("`--orphan-load-balancer-grace-period=-1s`", "--orphan-load-balancer-grace-period must not be negative", func(o *config.Options) { o.OrphanGracePeriod = -time.Second }, ""),
		flagged("`--retained-load-balancer-retention=-1s`", "--retained-load-balancer-retention must not be negative", func(o *config.Options) { o.RetainedLoadBalancerRetention = -time.Second }, ""),
		flagged("`--load-balancer-unready-grace-period=-1s`", "--load-balancer-unready-grace-period must not be negative", func(o *config.Options) { o.UnreadyGracePeriod = -time.Second }, ""),
		flagged("`--ironcore-kubeconfig` names no file", "read IronCore kubeconfig", func(o *config.Options) { o.IronCoreKubeconfig = "/nonexistent/ironcore.kubeconfig" }, ""),
		kubeconfig("An IronCore kubeconfig without a current context", "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n", "has no current context"),
		kubeconfig("An IronCore kubeconfig whose current context is not defined", "apiVersion: v1\nkind: Config\ncurrent-context: gone\n", `current context "gone" is not defined`),
		kubeconfig("An IronCore kubeconfig whose context sets no namespace", "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context: {cluster: cl, user: me}\nclusters:\n- name: cl\n  cluster: {server: \"https://127.0.0.1:1\"}\nusers:\n- name: me\n  user: {}\n", "sets no namespace"),

		service("Internal annotation `True`", provider.ReasonInvalidAnnotation, `must be "true" or "false", not "True"`, annotate(keys.AnnotationInternalLoadBalancer, "True")),
		service("Internal annotation `yes`", provider.ReasonInvalidAnnotation, `must be "true" or "false", not "yes"`, annotate(keys.AnnotationInternalLoadBalancer, "yes")),
		service("Internal annotation empty", provider.ReasonInvalidAnnotation, `must be "true" or "false", not ""`, annotate(keys.AnnotationInternalLoadBalancer, "")),
		service("A requested address on a Public Service that is not an address", provider.ReasonInvalidLoadBalancerIP, `"203.0.113.x" (annotation `+keys.AnnotationLoadBalancerIPs+`) is not an IP address`,
			annotate(keys.AnnotationLoadBalancerIPs, "203.0.113.x")),
		service("A Prefix annotation that is not a name", provider.ReasonInvalidAnnotation, `annotation `+keys.AnnotationLoadBalancerPrefix+` must name an IronCore Prefix, and "Team_A" is no object name`,
			annotate(keys.AnnotationInternalLoadBalancer, "true", keys.AnnotationLoadBalancerPrefix, "Team_A")),
		service("A Prefix annotation naming no Prefix", provider.ReasonInternalPrefixMissing, "IronCore Prefix "+stack.Namespace+"/no-such-prefix",
			annotate(keys.AnnotationInternalLoadBalancer, "true", keys.AnnotationLoadBalancerPrefix, "no-such-prefix")),
		service("A Prefix annotation naming a Prefix of the other family", provider.ReasonInternalPrefixMissing, "is IPv6, not IPv4",
			annotate(keys.AnnotationInternalLoadBalancer, "true", keys.AnnotationLoadBalancerPrefix, testenv.LoadBalancerPrefixV6)),
		service("A Prefix annotation naming a Prefix not designated for Services", provider.ReasonPrefixNotGranted, "IronCore Prefix "+testenv.NodePrefixV4+": it is not designated for Services' addresses",
			annotate(keys.AnnotationInternalLoadBalancer, "true", keys.AnnotationLoadBalancerPrefix, testenv.NodePrefixV4)),
		service("A requested Internal address outside the Service's Prefix", provider.ReasonAddressUnavailable, "the requested address 10.0.0.5 is not in Prefix "+testenv.LoadBalancerPrefix,
			annotate(keys.AnnotationInternalLoadBalancer, "true", keys.AnnotationLoadBalancerIPs, "10.0.0.5")),
		service("A requested address that is not an address", provider.ReasonInvalidLoadBalancerIP, `"10.1.0.300" (annotation `+keys.AnnotationLoadBalancerIPs+`) is not an IP address`,
			annotate(keys.AnnotationInternalLoadBalancer, "true", keys.AnnotationLoadBalancerIPs, "10.1.0.300")),
		service("`spec.loadBalancerIP` that is not an address", provider.ReasonInvalidLoadBalancerIP, `"10.1.0.x" (spec.loadBalancerIP) is not an IP address`,
			func(s *corev1.Service) {
				annotate(keys.AnnotationInternalLoadBalancer, "true")(s)
				s.Spec.LoadBalancerIP = "10.1.0.x"
			}),
		service("A requested address with a zone", provider.ReasonInvalidLoadBalancerIP, "is not an IP address",
			annotate(keys.AnnotationInternalLoadBalancer, "true", keys.AnnotationLoadBalancerIPs, "fe80::1%eth0")),
		service("A requested address of a family the Service does not have", provider.ReasonInvalidLoadBalancerIP, "is IPv6, but the Service's IP families are [IPv4]",
			annotate(keys.AnnotationInternalLoadBalancer, "true", keys.AnnotationLoadBalancerIPs, "fd00:20::1")),
		service("Two requested addresses of one family", provider.ReasonInvalidLoadBalancerIP, "are both IPv4; give at most one per family",
			annotate(keys.AnnotationInternalLoadBalancer, "true", keys.AnnotationLoadBalancerIPs, "10.1.200.7,10.1.200.8")),
		service("A port of an unsupported protocol", provider.ReasonUnsupportedPort, `spec.ports[0] ("http"): protocol ICMP is not supported`,
			func(s *corev1.Service) { s.Spec.Ports[0].Protocol = "ICMP" }),
		service("A port number out of range", provider.ReasonUnsupportedPort, `spec.ports[1] ("big"): 70000 is not a port number (1-65535)`,
			func(s *corev1.Service) {
				s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "big", Protocol: corev1.ProtocolTCP, Port: 70000})
			}),

		providerID("Another cloud's provider ID", "aws:///eu-west-1a/i-0123", `provider ID "aws:///eu-west-1a/i-0123" is not of the form ironcore://<namespace>/<machine>`),
		providerID("A provider ID without a Machine", "ironcore://"+stack.Namespace, "is not of the form ironcore://<namespace>/<machine>"),
		providerID("A provider ID with an empty Machine name", "ironcore://"+stack.Namespace+"/", "has an invalid machine name"),
		providerID("A provider ID with an invalid namespace", "ironcore://Tenant_A/worker", "has an invalid namespace"),
		providerID("A provider ID with an invalid Machine name", "ironcore://"+stack.Namespace+"/Bad_Machine", "has an invalid machine name"),
		providerID("A provider ID in another IronCore namespace", "ironcore://other-tenant/worker", `is in IronCore namespace "other-tenant", but this cluster's namespace is "`+stack.Namespace+`"`),

		machine("A Machine on no MachinePool", "is not scheduled on a MachinePool yet", func(t *testing.T, name string) {
			if _, err := stack.CreateMachine(context.Background(), name, testenv.MachineOptions{Unschedulable: true}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { deleteMachine(name) })
		}),
		machine("A NetworkInterface that never gets an IP", "has no IPs yet", func(t *testing.T, name string) {
			nic := &networkingv1alpha1.NetworkInterface{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: testenv.NetworkInterfaceName(name)}}
			stack.Simulator.Hold(nic)
			t.Cleanup(func() { stack.Simulator.Release(nic) })
			if _, err := stack.CreateMachine(context.Background(), name, testenv.MachineOptions{Pool: "pool-a"}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { deleteMachine(name) })
			testenv.Await(t, context.Background(), waitTimeout, "the NetworkInterface", func(ctx context.Context) error {
				return stack.IronCore.Client.Get(ctx, client.ObjectKeyFromObject(nic), &networkingv1alpha1.NetworkInterface{})
			})
		}),
		machine("A Machine whose only NetworkInterface is on another Network", "has no NetworkInterface on the cluster Network "+stack.Network, func(t *testing.T, name string) {
			other := &networkingv1alpha1.Network{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: "other-network"}}
			if err := stack.IronCore.Client.Create(context.Background(), other); client.IgnoreAlreadyExists(err) != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = stack.IronCore.Client.Delete(context.Background(), other) })
			if _, err := stack.CreateMachine(context.Background(), name, testenv.MachineOptions{Pool: "pool-a", Network: "other-network"}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { deleteMachine(name) })
			waitForNICIPs(t, name)
		}),
		{category: catIronCore, input: "A LoadBalancer of the Service's name recorded as another cluster's", answer: answerEvent(provider.ReasonOwnershipConflict),
			message: `of cluster "other-cluster"`, check: checkForeignLoadBalancer},
		{category: catIronCore, input: "`load-balancer-name` naming a LoadBalancer retained from another namespace", answer: answerEvent(provider.ReasonNotAdopted),
			message: "is retained for another namespace", check: func(t *testing.T, in badInput) {
				lbs := loadBalancerOf(t, testCloud(t))
				retained, _ := retainedLoadBalancer(t, lbs, fmt.Sprintf("bad-input-retained-%d", uniqueSuffix()))
				service := createService(t, fmt.Sprintf("bad-input-taker-%d", uniqueSuffix()), testenv.ServiceOptions{
					Namespace: namespace(t, "bad-input-other"), Annotations: map[string]string{keys.AnnotationLoadBalancerName: retained.Name}})
				refusedAdoption(t, lbs, service, retained.Name, in.message)
			}},
		{category: catIronCore, input: "An Internal Service asking for the address of a retained Public LoadBalancer", answer: answerEvent(provider.ReasonNotAdopted),
			message: "is Public and the Service asks for Internal", check: func(t *testing.T, in badInput) {
				lbs := loadBalancerOf(t, testCloud(t))
				retained, addresses := retainedLoadBalancer(t, lbs, fmt.Sprintf("bad-input-retained-%d", uniqueSuffix()))
				service := createService(t, fmt.Sprintf("bad-input-taker-%d", uniqueSuffix()), testenv.ServiceOptions{Annotations: map[string]string{
					keys.AnnotationInternalLoadBalancer: "true", keys.AnnotationLoadBalancerIPs: addresses[0]}})
				refusedAdoption(t, lbs, service, retained.Name, in.message)
			}},
		{category: catIronCore, input: "A Machine without a MachineClass", answer: "IronCore's API refuses to create it, so the CCM never meets one.",
			message: "must specify a machine class ref", check: checkMachineWithoutClass},
		{category: catIronCore, input: "An Internal Service whose Prefix (`prefixName`) has no free address", message: "IronCore has not allocated all addresses of the Service's LoadBalancer",
			answer: "The Service stays without an address, and a Warning event `" + lbrepair.ReasonAddressPending + "` says so after a minute; " +
				"the address is written as soon as IronCore allocates one.",
			check: checkFullPrefix},
	}
}

// checkStart starts a provider with the cloud-config content and the options, and checks it
// fails with the entry's message. That a failed start writes nothing, to IronCore or to the
// cluster, is checked on the binary, where it could (e2e TestStartupProblemsEndWithOneClearMessage).
func checkStart(t *testing.T, in badInput, content string, modify func(*config.Options), clusterFlag string) {
	checkStartWith(t, in, writeTemp(t, "cloud-config.yaml", content), modify, clusterFlag)
}

func checkStartWith(t *testing.T, in badInput, path string, modify func(*config.Options), clusterFlag string) {
	t.Helper()
	options := testOptions()
	if modify != nil {
		modify(options)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := provider.New(ctx, provider.Settings{CloudConfigPath: path, Options: options, Recorder: recorder,
		ClusterNameFlag: clusterFlag, ClusterNameFlagSet: clusterFlag != ""})
	if err == nil {
		// cmd checks the pod CIDR allocator's parents right after New, and stops as it stops on New's errors.
		if allocator := podcidrs.ForProvider(c, provider.NotReady); allocator != nil {
			err = provider.StartupCheck(ctx, "Checking the pod CIDR parents", allocator.Check)
		}
	}
	if err == nil || !strings.Contains(err.Error(), in.message) {
		t.Fatalf("%s: start error %v, want one containing %q", in.input, err, in.message)
	}
}

// servedService is a Service with its IronCore LoadBalancer, which bad edits must leave alone,
// served by the returned load balancers.
func servedService(t *testing.T) (cloudprovider.LoadBalancer, *corev1.Service, *networkingv1alpha1.LoadBalancer, []*corev1.Node) {
	t.Helper()
	nodes := workerNodes(t, fmt.Sprintf("bad-input-%d", uniqueSuffix()))
	service := createService(t, fmt.Sprintf("bad-input-%d", uniqueSuffix()), testenv.ServiceOptions{})
	lbs := loadBalancerOf(t, testCloud(t))
	ensureUntilReady(t, lbs, service, nodes)
	// No service controller runs here to delete it with the Service; left on the Network, a
	// LoadBalancer without a selector would slow IronCore's routing of later tests'.
	t.Cleanup(func() { _ = lbs.EnsureLoadBalancerDeleted(context.Background(), "kubernetes", service) })
	return lbs, service, ironcoreLoadBalancer(t, lbspec.Name(service)), nodes
}

// checkService makes a bad edit to a served Service and checks the event, the error, and that
// its LoadBalancer is unchanged and nothing was written.
func checkService(t *testing.T, in badInput, reason string, modify func(*corev1.Service)) {
	t.Helper()
	lbs, service, before, nodes := servedService(t)
	edited := service.DeepCopy()
	modify(edited)
	stack.IronCoreProxy.Reset()
	_, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", edited, nodes)
	if !errorContains(err, in.message) {
		t.Fatalf("%s: EnsureLoadBalancer error %v, want one containing %q", in.input, err, in.message)
	}
	waitForEventWith(t, service, reason, in.message)
	if w := writes(); len(w) > 0 {
		t.Errorf("%s: a rejected edit caused writes: %v", in.input, w)
	}
	if after := ironcoreLoadBalancer(t, before.Name); after.ResourceVersion != before.ResourceVersion || after.DeletionTimestamp != nil {
		t.Errorf("%s: the Service's LoadBalancer was changed", in.input)
	}
}

// checkNode asks for the Node's metadata and whether its Machine exists, as the cloud node
// controllers do, and checks both fail with the message (so the Node is neither initialized
// wrongly nor deleted) and nothing was written.
func checkNode(t *testing.T, in badInput, n *corev1.Node) {
	t.Helper()
	instances := instancesV2(t)
	stack.IronCoreProxy.Reset()
	ctx := context.Background()
	// The provider reads Machines and NetworkInterfaces from its cache, which may not have
	// seen one just created: the answer settles as the framework's retries would see it.
	err := testenv.WaitFor(ctx, waitTimeout, "the answer", func(ctx context.Context) error {
		if _, err := instances.InstanceMetadata(ctx, n); !errorContains(err, in.message) {
			return fmt.Errorf("InstanceMetadata error %w, want one containing %q", err, in.message)
		}
		return nil
	})
	if err != nil {
		t.Errorf("%s: %v", in.input, err)
	}
	if exists, err := instances.InstanceExists(ctx, n); !exists && err == nil {
		t.Errorf("%s: InstanceExists says the Machine is gone: the Node would be deleted", in.input)
	}
	if w := writes(); len(w) > 0 {
		t.Errorf("%s: caused writes: %v", in.input, w)
	}
}

func checkForeignLoadBalancer(t *testing.T, in badInput) {
	ctx := context.Background()
	c := testCloud(t)
	lbs := loadBalancerOf(t, c)
	service := createService(t, fmt.Sprintf("bad-input-foreign-%d", uniqueSuffix()), testenv.ServiceOptions{})
	foreign := referenceLoadBalancer(t, lbspec.Name(service), "other-cluster", service, false, c)
	t.Cleanup(func() { _ = stack.IronCore.Client.Delete(context.Background(), foreign) })
	stack.IronCoreProxy.Reset()
	if _, err := lbs.EnsureLoadBalancer(ctx, "kubernetes", service, nil); !errorContains(err, in.message) {
		t.Fatalf("EnsureLoadBalancer error %v, want one containing %q", err, in.message)
	}
	waitForEventWith(t, service, provider.ReasonOwnershipConflict, in.message)
	if err := lbs.EnsureLoadBalancerDeleted(ctx, "kubernetes", service); err != nil {
		t.Errorf("EnsureLoadBalancerDeleted: %v", err)
	}
	if w := writes(); len(w) > 0 {
		t.Errorf("writes: %v", w)
	}
	if after := ironcoreLoadBalancer(t, foreign.Name); after.ResourceVersion != foreign.ResourceVersion || after.DeletionTimestamp != nil {
		t.Errorf("the foreign LoadBalancer was changed")
	}
}

func checkMachineWithoutClass(t *testing.T, in badInput) {
	machine := &computev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: "no-class"}}
	err := stack.IronCore.Client.Create(context.Background(), machine)
	if err == nil {
		deleteMachine(machine.Name)
		t.Fatal("IronCore created a Machine without a MachineClass")
	}
	if !strings.Contains(err.Error(), in.message) {
		t.Fatalf("create: %v, want an error containing %q", err, in.message)
	}
}

// checkFullPrefix serves an Internal Service from a Prefix with no free address: the
// LoadBalancer waits, the repair controller warns, and the Prefix's allocation is untouched.
func checkFullPrefix(t *testing.T, in badInput) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	name := fmt.Sprintf("full-lbs-%d", uniqueSuffix())
	root, err := stack.CreateRootPrefix(ctx, name, "10.251.0.0/30", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stack.IronCore.Client.Delete(context.Background(), root) })
	// Two halves take every address of the parent.
	var taken []*ipamv1alpha1.Prefix
	for i, half := range []string{"10.251.0.0/31", "10.251.0.2/31"} {
		prefix := &ipamv1alpha1.Prefix{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: fmt.Sprintf("%s-taken-%d", name, i)}}
		prefix.Spec.ParentRef = &corev1.LocalObjectReference{Name: name}
		prefix.Spec.Prefix = commonv1alpha1.MustParseNewIPPrefix(half)
		if err := stack.IronCore.Client.Create(ctx, prefix); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = stack.IronCore.Client.Delete(context.Background(), prefix) })
		taken = append(taken, prefix)
	}
	testenv.Await(t, ctx, waitTimeout, "the Prefixes to fill their parent", func(ctx context.Context) error {
		for _, prefix := range taken {
			if err := stack.IronCore.Client.Get(ctx, client.ObjectKeyFromObject(prefix), prefix); err != nil {
				return err
			}
			if prefix.Status.Phase != ipamv1alpha1.PrefixPhaseAllocated {
				return fmt.Errorf("%s: phase %q", prefix.Name, prefix.Status.Phase)
			}
		}
		return nil
	})
	path := writeTemp(t, "cloud-config.yaml", fmt.Sprintf("networkName: %s\nprefixName: %s\nclusterName: %s\n", stack.Network, name, stack.ClusterName))
	c, factory, stop := startWithInformers(t, provider.Settings{CloudConfigPath: path, Options: testOptions(), Recorder: recorder})
	lbs := loadBalancerOf(t, c)
	repair, err := lbrepair.New(lbrepair.Config{
		IronCore: c.IronCore(), LoadBalancers: lbs, AllocatedStatus: c.AllocatedLoadBalancerStatus, ClusterName: "kubernetes",
		Services: factory.Core().V1().Services(), Nodes: factory.Core().V1().Nodes(),
		PendingWarning: 2 * time.Second, Client: stack.TargetClientset, Recorder: recorder,
	})
	if err != nil {
		t.Fatal(err)
	}
	c.ReportAddressesOnArrival()
	factory.Start(stop)
	go repair.Run(ctx, 1)

	service := createService(t, name, testenv.ServiceOptions{Annotations: map[string]string{keys.AnnotationInternalLoadBalancer: "true"}})
	if _, err := lbs.EnsureLoadBalancer(ctx, "kubernetes", service, nil); err != nil {
		t.Fatalf("EnsureLoadBalancer: %v", err)
	}
	waitForEventWith(t, service, lbrepair.ReasonAddressPending, in.message)
	current, err := stack.TargetClientset.CoreV1().Services(service.Namespace).Get(ctx, service.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(current.Status.LoadBalancer.Ingress) > 0 {
		t.Errorf("the Service has addresses %v from a full Prefix", current.Status.LoadBalancer.Ingress)
	}
	for _, prefix := range taken {
		before := prefix.ResourceVersion
		if err := stack.IronCore.Client.Get(ctx, client.ObjectKeyFromObject(prefix), prefix); err != nil || prefix.ResourceVersion != before {
			t.Errorf("Prefix %s, which fills the parent, was changed (%v)", prefix.Name, err)
		}
	}
	_ = lbs.EnsureLoadBalancerDeleted(ctx, "kubernetes", service)
}

// waitForEventWith waits for an event with the reason on the Service whose message contains
// text.
func waitForEventWith(t *testing.T, service *corev1.Service, reason, text string) {
	t.Helper()
	waitForEventText(t, service.Namespace, "involvedObject.uid="+string(service.UID)+",reason="+reason, "event "+reason, text)
}

// waitForBadInputObjectsGone waits until IronCore has deleted the Machines and
// NetworkInterfaces the entries created, so that the tests after them meet a quiet IronCore.
func waitForBadInputObjectsGone(t *testing.T) {
	t.Helper()
	err := testenv.WaitFor(context.Background(), 2*waitTimeout, "the bad inputs' Machines and NetworkInterfaces to be gone", func(ctx context.Context) error {
		machines := &computev1alpha1.MachineList{}
		nics := &networkingv1alpha1.NetworkInterfaceList{}
		for _, list := range []client.ObjectList{machines, nics} {
			if err := stack.IronCore.Client.List(ctx, list, client.InNamespace(stack.Namespace)); err != nil {
				return err
			}
		}
		left := 0
		for _, machine := range machines.Items {
			if strings.HasPrefix(machine.Name, "odd-") || strings.HasPrefix(machine.Name, "bad-input-") {
				left++
			}
		}
		for _, nic := range nics.Items {
			if strings.HasPrefix(nic.Name, "odd-") || strings.HasPrefix(nic.Name, "bad-input-") {
				left++
			}
		}
		if left > 0 {
			return fmt.Errorf("%d left", left)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

func annotate(keyValues ...string) func(*corev1.Service) {
	return func(s *corev1.Service) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		for i := 0; i+1 < len(keyValues); i += 2 {
			s.Annotations[keyValues[i]] = keyValues[i+1]
		}
	}
}

func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func deleteMachine(name string) {
	_ = stack.IronCore.Client.Delete(context.Background(), &computev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: name}})
}

func waitForNICIPs(t *testing.T, machine string) {
	t.Helper()
	nic := &networkingv1alpha1.NetworkInterface{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: testenv.NetworkInterfaceName(machine)}}
	stack.WaitForIronCore(t, waitTimeout, "the NetworkInterface's IPs", nic, func() error {
		if len(nic.Status.IPs) == 0 {
			return errors.New("none yet")
		}
		return nil
	})
}

// renderCatalogue writes the catalogue document from the table.
func renderCatalogue(entries []badInput) string {
	var b strings.Builder
	b.WriteString("<!-- Generated by TestBadInputs (pkg/provider/badinputs_test.go); DO NOT EDIT. Run `go test ./pkg/provider -run TestBadInputs -update-catalogue` to update. -->\n\n")
	b.WriteString("# Bad inputs and what the CCM answers\n\n")
	fmt.Fprintf(&b, "Every entry is a case of `TestBadInputs`, which runs it against the test stack (real kube-apiserver, IronCore API "+
		"server and controller-manager) and asserts the answer below and that nothing that existed was changed: a start that "+
		"fails has written nothing to IronCore; a rejected Service edit leaves the Service's IronCore LoadBalancer exactly as "+
		"it was (same resourceVersion) and writes nothing; a Node whose Machine cannot be read is neither initialized with "+
		"wrong data nor reported gone (which would delete it), and nothing is written. %d entries.\n", len(entries))
	category := ""
	for i, in := range entries {
		if in.category != category {
			category = in.category
			fmt.Fprintf(&b, "\n## %s\n\n| # | Bad input | What the user sees | Message (part) |\n|---:|---|---|---|\n", category)
		}
		fmt.Fprintf(&b, "| %d | %s | %s | `%s` |\n", i+1, in.input, in.answer, strings.ReplaceAll(in.message, "|", `\|`))
	}
	return b.String()
}
