// Package nodeipam sets Nodes' pod CIDRs from IronCore's IPAM, as the alternative to
// kube-controller-manager's --allocate-node-cidrs. spec.podCIDRs is immutable, so it is set in
// one write once every family is allocated. Workers never wait: a waiting Node is synced again
// when a pod CIDR Prefix changes, and with a backoff.
package nodeipam

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	ipamv1alpha1 "github.com/ironcore-dev/ironcore/api/ipam/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/metrics"
)

// Name is the controller's name in --controllers.
const Name = "ironcore-node-ipam"

// Reasons of the events on Nodes.
const (
	ReasonAllocated     = "PodCIDRsAllocated"
	ReasonFailed        = "PodCIDRAllocationFailed"
	ReasonFromElsewhere = "PodCIDRsFromAnotherAllocator"
	ReasonMachineShared = "PodCIDRMachineShared"
	ReasonHeldElsewhere = "PodCIDRHeldByAnotherNode"
)

// ErrMachineShared is wrapped by an allocator that refuses a Node because another Node runs on
// the same Machine: both would get the same pod CIDRs.
var ErrMachineShared = errors.New("another Node runs on the same Machine")

// Allocation is the state of a Node's pod CIDRs, as the allocator found or moved it.
type Allocation struct {
	// NetworkInterface holds the Node's entries.
	NetworkInterface string
	// CIDRs are the pod CIDRs, IPv4 first, once every configured family has one.
	CIDRs []string
	// Pending says what each family in PendingFamilies awaits.
	Pending         []string
	PendingFamilies []corev1.IPFamily
	Added           bool
	// FromElsewhere is true when the Node has pod CIDRs that IronCore did not allocate for it.
	FromElsewhere bool
	// Released are the entries released because the Node has pod CIDRs from elsewhere.
	Released []string
}

// Released are the pod CIDR entries a release removed from one NetworkInterface.
type Released struct {
	NetworkInterface, Machine string
	CIDRs                     []string
}

// Allocator is the provider's side: see provider.Cloud.
type Allocator interface {
	AllocatePodCIDRs(ctx context.Context, node *corev1.Node) (Allocation, error)
	ReleaseUnusedPodCIDRs(ctx context.Context) ([]Released, error)
	DiagnosePodCIDRs(ctx context.Context, family corev1.IPFamily) string
}

// Defaults of Config.
const (
	DefaultReleaseEvery = time.Minute
	DefaultExplainAfter = 10 * time.Second
)

// Config wires the controller.
type Config struct {
	IronCore  *ironcore.Client
	Allocator Allocator
	Nodes     coreinformers.NodeInformer
	// Client writes Nodes' spec.podCIDRs.
	Client   kubernetes.Interface
	Recorder record.EventRecorder
	// ReleaseEvery is how often unused entries are looked for besides on Node deletions.
	ReleaseEvery time.Duration
	// ExplainAfter is how long a Node waits before the controller reports why.
	ExplainAfter time.Duration
}

// Controller is the node IPAM controller.
type Controller struct {
	Config
	nodes   corelisters.NodeLister
	synced  toolscache.InformerSynced
	queue   workqueue.TypedRateLimitingInterface[string]
	started time.Time
	// releasing is held by a release pass, and shared by Node syncs: a release never runs
	// between a sync's reading of a Node's entries and its write of the Node's pod CIDRs.
	releasing sync.RWMutex
	// mu guards waiting, waitingOn, reported, set and diagnoses.
	mu sync.Mutex
	// waitingOn maps a waiting Node's NetworkInterface to the Node, for Prefix changes.
	waiting   map[string]*waitingNode
	waitingOn map[string]string
	reported  map[string]bool // Nodes reported as having pod CIDRs from elsewhere
	// set holds the pod CIDRs this process set on Nodes, by Node, until the Node is deleted:
	// a Node cache behind those writes would not show them to heldElsewhere.
	set map[string][]string
	// diagnoses caches each family's last diagnosis: in a burst, many Nodes wait on the same
	// parents, and one live read answers for all of them.
	diagnoses map[corev1.IPFamily]diagnosis
}

type waitingNode struct {
	since time.Time
	// nextLook is when to look for why it waits; explained is true once that was reported.
	nextLook         time.Time
	explained        bool
	networkInterface string
	// refusal is the reason last reported, so that each is reported once per wait.
	refusal string
}

type diagnosis struct {
	at      time.Time
	problem string
}

// releaseKey is the queue item of a release pass; Node names are never empty.
const releaseKey = ""

// New registers the controller's event handlers. Call it before the informers start.
func New(config Config) (*Controller, error) {
	if config.ReleaseEvery <= 0 {
		config.ReleaseEvery = DefaultReleaseEvery
	}
	if config.ExplainAfter <= 0 {
		config.ExplainAfter = DefaultExplainAfter
	}
	// Prefix changes bring a waiting Node in sooner than this backoff.
	limiter := workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 30*time.Second)
	c := &Controller{
		Config:    config,
		nodes:     config.Nodes.Lister(),
		synced:    config.Nodes.Informer().HasSynced,
		queue:     workqueue.NewTypedRateLimitingQueueWithConfig(limiter, workqueue.TypedRateLimitingQueueConfig[string]{Name: Name}),
		started:   time.Now(),
		waiting:   map[string]*waitingNode{},
		waitingOn: map[string]string{},
		reported:  map[string]bool{},
		set:       map[string][]string{},
		diagnoses: map[corev1.IPFamily]diagnosis{},
	}
	_, err := config.Nodes.Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if node, ok := obj.(*corev1.Node); ok {
				c.queue.Add(node.Name)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(*corev1.Node)
			node, ok2 := newObj.(*corev1.Node)
			// A Node without pod CIDRs may have become resolvable (provider ID, addresses); one
			// that just got them may have got them from elsewhere.
			if ok1 && ok2 && (!HasPodCIDRs(node) || !HasPodCIDRs(old)) {
				c.queue.Add(node.Name)
			}
		},
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if node, ok := obj.(*corev1.Node); ok {
				c.stopWaiting(node.Name)
				c.mu.Lock()
				delete(c.reported, node.Name)
				delete(c.set, node.Name)
				// A waiting Node may have waited for this one to leave its Machine, or to give
				// up its pod CIDRs.
				for name := range c.waiting {
					c.queue.Add(name)
				}
				c.mu.Unlock()
			}
			c.queue.Add(releaseKey)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("watch Nodes: %w", err)
	}
	if err := config.IronCore.OnPodCIDRPrefixChange(c.queueWaitingFor); err != nil {
		return nil, err
	}
	return c, nil
}

// Name is the controller's name.
func (c *Controller) Name() string { return Name }

// HasPodCIDRs tells whether the Node has pod CIDRs.
func HasPodCIDRs(node *corev1.Node) bool {
	return len(node.Spec.PodCIDRs) > 0 || node.Spec.PodCIDR != ""
}

// queueWaitingFor syncs the Node whose NetworkInterface controls the Prefix, if it waits.
func (c *Controller) queueWaitingFor(prefix *ipamv1alpha1.Prefix) {
	owner := metav1.GetControllerOf(prefix)
	if owner == nil || owner.Kind != "NetworkInterface" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if name, ok := c.waitingOn[owner.Name]; ok {
		c.queue.Add(name)
	}
}

// Run syncs Nodes with workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	if !toolscache.WaitForNamedCacheSync(Name, ctx.Done(), c.synced) || !c.IronCore.WaitForCacheSync(ctx) {
		return
	}
	for range workers {
		go wait.UntilWithContext(ctx, c.work, time.Second)
	}
	// Releases missed while the CCM was down happen now.
	wait.UntilWithContext(ctx, func(context.Context) { c.queue.Add(releaseKey) }, c.ReleaseEvery)
}

func (c *Controller) work(ctx context.Context) {
	for {
		name, shutdown := c.queue.Get()
		if shutdown {
			return
		}
		retry, err := c.sync(ctx, name)
		switch {
		case err != nil && name == releaseKey:
			klog.ErrorS(err, "Cannot release pod CIDRs")
			c.queue.AddRateLimited(name)
		case err != nil:
			metrics.PodCIDRAllocations.WithLabelValues("failed").Inc()
			klog.ErrorS(err, "Cannot sync pod CIDRs", "node", klog.KRef("", name))
			c.queue.AddRateLimited(name)
		case retry:
			c.queue.AddRateLimited(name)
		default:
			c.queue.Forget(name)
		}
		c.queue.Done(name)
	}
}

// sync handles one queue item; retry asks for it to be synced again later.
func (c *Controller) sync(ctx context.Context, name string) (retry bool, err error) {
	if name == releaseKey {
		c.releasing.Lock()
		defer c.releasing.Unlock()
		return false, c.release(ctx)
	}
	c.releasing.RLock()
	defer c.releasing.RUnlock()
	node, err := c.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		c.stopWaiting(name)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	allocation, err := c.Allocator.AllocatePodCIDRs(ctx, node)
	if HasPodCIDRs(node) {
		c.stopWaiting(name)
		c.reportExisting(node, allocation)
		return false, err
	}
	if errors.Is(err, ErrMachineShared) {
		c.refuse(node, refusal{Reason: ReasonMachineShared, Message: err.Error()})
		return true, nil
	}
	if err != nil {
		c.explain(ctx, node, "", nil, err.Error())
		return false, err
	}
	if allocation.CIDRs == nil {
		c.explain(ctx, node, allocation.NetworkInterface, allocation.PendingFamilies, strings.Join(allocation.Pending, "; "))
		return true, nil
	}
	// IronCore gives a pod CIDR back as soon as the NetworkInterface that held it is gone, which
	// is before the Node of its Machine is deleted: until then that Node keeps the range.
	if other, cidr := c.heldElsewhere(node, allocation.CIDRs); other != "" {
		c.refuse(node, refusal{Reason: ReasonHeldElsewhere, Message: fmt.Sprintf("pod CIDR %s, which IronCore allocated on NetworkInterface %s, is still the pod CIDR of Node %s; "+
			"waiting for that Node to be deleted or to give it up", cidr, allocation.NetworkInterface, other)})
		return true, nil
	}
	if err := c.setPodCIDRs(ctx, node, allocation.CIDRs); err != nil {
		if errors.Is(err, errAlreadySet) {
			c.stopWaiting(name)
			return false, nil
		}
		return false, err
	}
	c.stopWaiting(name)
	c.mu.Lock()
	c.set[name] = allocation.CIDRs
	c.mu.Unlock()
	metrics.PodCIDRAllocations.WithLabelValues("allocated").Inc()
	metrics.PodCIDRAllocationDuration.Observe(time.Since(node.CreationTimestamp.Time).Seconds())
	c.Recorder.Eventf(node, corev1.EventTypeNormal, ReasonAllocated, "Pod CIDRs %s allocated by IronCore on NetworkInterface %s",
		strings.Join(allocation.CIDRs, ", "), allocation.NetworkInterface)
	klog.InfoS("Set pod CIDRs from IronCore", "node", klog.KObj(node), "podCIDRs", allocation.CIDRs,
		"networkInterface", klog.KRef(c.IronCore.Namespace(), allocation.NetworkInterface))
	return false, nil
}

// setPodCIDRs writes the pod CIDRs in one patch that first tests that the Node has none: another
// allocator that got there first wins.
func (c *Controller) setPodCIDRs(ctx context.Context, node *corev1.Node, cidrs []string) error {
	patch, err := json.Marshal([]map[string]any{
		// The Node read, not another of the same name registered since.
		{"op": "test", "path": "/metadata/uid", "value": node.UID},
		{"op": "test", "path": "/spec/podCIDRs", "value": nil},
		{"op": "add", "path": "/spec/podCIDR", "value": cidrs[0]},
		{"op": "add", "path": "/spec/podCIDRs", "value": cidrs},
	})
	if err != nil {
		return err
	}
	_, err = c.Client.CoreV1().Nodes().Patch(ctx, node.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
	if err == nil {
		return nil
	}
	// The test fails when the Node has pod CIDRs, which the cache did not show: set by an
	// earlier sync of this controller (done, then), or by someone else (the next sync sees it).
	if live, getErr := c.Client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{}); getErr == nil && HasPodCIDRs(live) {
		if !slices.Equal(live.Spec.PodCIDRs, cidrs) {
			c.queue.Add(node.Name)
		}
		return errAlreadySet
	}
	return fmt.Errorf("set the pod CIDRs %s of Node %s: %w", strings.Join(cidrs, ","), node.Name, err)
}

var errAlreadySet = errors.New("the Node has pod CIDRs already")

// explain records that the Node waits and, every ExplainAfter until it finds a reason, looks
// for why; it reports the reason once per wait.
func (c *Controller) explain(ctx context.Context, node *corev1.Node, nic string, families []corev1.IPFamily, waitingFor string) {
	c.mu.Lock()
	waiting, ok := c.waiting[node.Name]
	if !ok {
		waiting = &waitingNode{since: time.Now(), nextLook: time.Now().Add(c.ExplainAfter)}
		c.waiting[node.Name] = waiting
		metrics.PodCIDRsPending.Set(float64(len(c.waiting)))
	}
	if nic != "" && waiting.networkInterface != nic {
		delete(c.waitingOn, waiting.networkInterface)
		waiting.networkInterface = nic
		c.waitingOn[nic] = node.Name
	}
	due := !waiting.explained && !time.Now().Before(waiting.nextLook)
	if due {
		waiting.nextLook = time.Now().Add(c.ExplainAfter)
	}
	c.mu.Unlock()
	if !due {
		klog.V(4).InfoS("Waiting for pod CIDRs", "node", klog.KObj(node), "waitingFor", waitingFor)
		return
	}
	var problems []string
	for _, family := range families {
		if problem := c.diagnose(ctx, family); problem != "" {
			problems = append(problems, problem)
		}
	}
	if families != nil && len(problems) == 0 {
		// Nothing wrong with the parents: IronCore is just slow. Look again later.
		klog.V(2).InfoS("Still waiting for pod CIDRs", "node", klog.KObj(node), "waitingFor", waitingFor)
		return
	}
	message := waitingFor
	if len(problems) > 0 {
		message = strings.Join(problems, "; ")
	}
	c.mu.Lock()
	waiting.explained = true
	c.mu.Unlock()
	c.Recorder.Eventf(node, corev1.EventTypeWarning, ReasonFailed, "No pod CIDRs yet: %s", message)
	klog.InfoS("Pod CIDRs cannot be allocated yet", "node", klog.KObj(node), "reason", message)
}

type refusal struct {
	Reason, Message string
}

// refuse records that the Node waits for another Node and reports it at once, once per reason.
func (c *Controller) refuse(node *corev1.Node, r refusal) {
	c.mu.Lock()
	waiting, ok := c.waiting[node.Name]
	if !ok {
		waiting = &waitingNode{since: time.Now()}
		c.waiting[node.Name] = waiting
		metrics.PodCIDRsPending.Set(float64(len(c.waiting)))
	}
	due := waiting.refusal != r.Reason
	waiting.refusal = r.Reason
	c.mu.Unlock()
	if !due {
		return
	}
	c.Recorder.Eventf(node, corev1.EventTypeWarning, r.Reason, "Not allocating pod CIDRs: %s", r.Message)
	klog.InfoS("Not allocating pod CIDRs", "node", klog.KObj(node), "reason", r.Reason, "detail", r.Message)
}

// heldElsewhere names another Node whose pod CIDRs overlap cidrs, and the CIDR, counting those
// this process set, which the cache may not show yet.
func (c *Controller) heldElsewhere(node *corev1.Node, cidrs []string) (string, string) {
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return "", ""
	}
	held := map[string][]string{}
	for _, other := range nodes {
		held[other.Name] = other.Spec.PodCIDRs
	}
	c.mu.Lock()
	for name, set := range c.set {
		if len(held[name]) == 0 {
			held[name] = set
		}
	}
	c.mu.Unlock()
	for _, cidr := range cidrs {
		want, err := netip.ParsePrefix(cidr)
		if err != nil {
			continue
		}
		for name, theirs := range held {
			if name == node.Name {
				continue
			}
			for _, h := range theirs {
				if prefix, err := netip.ParsePrefix(h); err == nil && prefix.Overlaps(want) {
					return name, cidr
				}
			}
		}
	}
	return "", ""
}

// diagnose asks the allocator what is wrong with the family's parents, at most once per half
// ExplainAfter.
func (c *Controller) diagnose(ctx context.Context, family corev1.IPFamily) string {
	c.mu.Lock()
	last, ok := c.diagnoses[family]
	c.mu.Unlock()
	if ok && time.Since(last.at) < c.ExplainAfter/2 {
		return last.problem
	}
	problem := c.Allocator.DiagnosePodCIDRs(ctx, family)
	c.mu.Lock()
	c.diagnoses[family] = diagnosis{at: time.Now(), problem: problem}
	c.mu.Unlock()
	return problem
}

func (c *Controller) stopWaiting(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if waiting, ok := c.waiting[name]; ok {
		delete(c.waitingOn, waiting.networkInterface)
	}
	delete(c.waiting, name)
	metrics.PodCIDRsPending.Set(float64(len(c.waiting)))
}

// reportExisting reports pod CIDRs that IronCore did not allocate: a Node older than this
// controller keeps them quietly (a cluster moving from another allocator), a newer one gets a
// Warning (another allocator is on too).
func (c *Controller) reportExisting(node *corev1.Node, allocation Allocation) {
	if len(allocation.Released) > 0 {
		metrics.PodCIDRsReleased.WithLabelValues("unused").Add(float64(len(allocation.Released)))
		klog.InfoS("Released unused pod CIDR entries: the Node has other pod CIDRs", "node", klog.KObj(node),
			"released", allocation.Released, "podCIDRs", node.Spec.PodCIDRs)
	}
	if !allocation.FromElsewhere {
		return
	}
	c.mu.Lock()
	first := !c.reported[node.Name]
	c.reported[node.Name] = true
	c.mu.Unlock()
	if !first {
		return
	}
	if node.CreationTimestamp.Time.Before(c.started) {
		klog.V(2).InfoS("The Node keeps pod CIDRs from another allocator", "node", klog.KObj(node), "podCIDRs", node.Spec.PodCIDRs)
		return
	}
	metrics.PodCIDRAllocations.WithLabelValues("from-elsewhere").Inc()
	c.Recorder.Eventf(node, corev1.EventTypeWarning, ReasonFromElsewhere,
		"The Node got pod CIDRs %s from another allocator while IronCore's IPAM is on: keep only one (kube-controller-manager's "+
			"--allocate-node-cidrs=false with this CCM's pod CIDR allocation); the Node keeps them", strings.Join(node.Spec.PodCIDRs, ", "))
	klog.InfoS("A new Node got pod CIDRs from another allocator; is kube-controller-manager's --allocate-node-cidrs on too?",
		"node", klog.KObj(node), "podCIDRs", node.Spec.PodCIDRs)
}

// release removes the entries of Machines whose Node is gone.
func (c *Controller) release(ctx context.Context) error {
	released, err := c.Allocator.ReleaseUnusedPodCIDRs(ctx)
	for _, r := range released {
		metrics.PodCIDRsReleased.WithLabelValues("node-gone").Add(float64(len(r.CIDRs)))
	}
	return err
}
