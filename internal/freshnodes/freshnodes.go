// Package freshnodes gives the upstream cloud node controller the newest copy of a Node this
// process knows, so that its update does not conflict with a write it could have known about.
//
// The upstream node controller retries a conflict on its lister's copy, 20 times 50-100 ms.
// Under a burst of joining Nodes the informer lags by seconds, so any other write to the Node
// turns every retry into another conflict (kubernetes/kubernetes#56276) while the Node stays
// tainted. Here the lister answers with the newer of its copy and the last write's result, and
// a conflict reads the Node from the API server once.
package freshnodes

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
)

// readTimeout bounds the read of a Node after a conflict: a lister's Get has no context, so the
// read is not cancelled when the controller stops, but ends by then.
const readTimeout = 10 * time.Second

// Nodes remembers, per Node, what the writes made through Client returned and whether the last
// one conflicted. Share one between the Informer and the Client given to the same controller.
type Nodes struct {
	informer coreinformers.NodeInformer
	client   kubernetes.Interface

	mu sync.Mutex
	// written holds a Node as a write returned it, until the informer shows that version.
	written map[string]*corev1.Node
	// conflicted names the Nodes whose last write conflicted: the next Get reads the API server.
	conflicted map[string]bool
}

// New wraps a Node informer and the client of the controller that reads and writes through them.
// Call it before the informer starts.
func New(informer coreinformers.NodeInformer, client kubernetes.Interface) (*Nodes, error) {
	n := &Nodes{informer: informer, client: client, written: map[string]*corev1.Node{}, conflicted: map[string]bool{}}
	// What is remembered of a Node goes with it, whether or not the controller reads it again.
	_, err := informer.Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if node, ok := obj.(*corev1.Node); ok {
				n.forget(node.Name)
			}
		},
	})
	return n, err
}

// Informer is the Node informer with a lister whose Get gives the newest known copy; its
// handlers, store and List are the informer's own.
func (n *Nodes) Informer() coreinformers.NodeInformer {
	return informer{NodeInformer: n.informer, nodes: n}
}

// Client is the client whose Node writes the lister learns from.
func (n *Nodes) Client() kubernetes.Interface { return client{Interface: n.client, nodes: n} }

// get returns the newest copy of a Node this process knows, given the informer's.
func (n *Nodes) get(name string) (*corev1.Node, error) {
	cached, err := n.informer.Lister().Get(name)
	if err != nil {
		n.forget(name)
		return nil, err
	}
	if n.takeConflict(name) {
		live, err := n.read(name)
		switch {
		case err == nil && live.UID != cached.UID:
			// Another Node of the same name: the controller waits for the cache, as without
			// this package, rather than apply what it made of the first to the second.
			return cached, nil
		case err == nil:
			n.observe(live)
			return live, nil
		case apierrors.IsNotFound(err):
			n.forget(name)
			return nil, err
		}
		// The attempt is made on the copy at hand, as without this package, and may conflict again.
		klog.V(2).InfoS("Cannot read a Node after a conflicting update; its copy in the cache is used", "node", klog.KRef("", name), "err", err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if written, ok := n.written[name]; ok {
		if written.UID == cached.UID && ironcore.NewerVersion(written.ResourceVersion, cached.ResourceVersion) {
			return written, nil
		}
		delete(n.written, name)
	}
	return cached, nil
}

func (n *Nodes) read(name string) (*corev1.Node, error) {
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	return n.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
}

func (n *Nodes) takeConflict(name string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	conflicted := n.conflicted[name]
	delete(n.conflicted, name)
	return conflicted
}

// observe remembers a copy of node as a write or read returned it, unless a newer copy of the
// same Node is known. The copy is the lister's to give out, whatever the writer does with its own.
func (n *Nodes) observe(node *corev1.Node) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if known, ok := n.written[node.Name]; ok && known.UID == node.UID && !ironcore.NewerVersion(node.ResourceVersion, known.ResourceVersion) {
		return
	}
	n.written[node.Name] = node.DeepCopy()
}

// wrote records the outcome of a write of the named Node.
func (n *Nodes) wrote(name string, node *corev1.Node, err error) {
	switch {
	case err == nil && node != nil:
		n.observe(node)
	case apierrors.IsConflict(err):
		n.mu.Lock()
		n.conflicted[name] = true
		n.mu.Unlock()
	}
}

func (n *Nodes) forget(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.written, name)
	delete(n.conflicted, name)
}

type informer struct {
	coreinformers.NodeInformer
	nodes *Nodes
}

func (i informer) Lister() corelisters.NodeLister {
	return lister{NodeLister: i.NodeInformer.Lister(), nodes: i.nodes}
}

type lister struct {
	corelisters.NodeLister
	nodes *Nodes
}

func (l lister) Get(name string) (*corev1.Node, error) { return l.nodes.get(name) }

// client, coreV1 and nodeClient pass every request on, and tell Nodes what Node writes returned.
type client struct {
	kubernetes.Interface
	nodes *Nodes
}

func (c client) CoreV1() corev1client.CoreV1Interface {
	return coreV1{CoreV1Interface: c.Interface.CoreV1(), nodes: c.nodes}
}

type coreV1 struct {
	corev1client.CoreV1Interface
	nodes *Nodes
}

func (c coreV1) Nodes() corev1client.NodeInterface {
	return nodeClient{NodeInterface: c.CoreV1Interface.Nodes(), nodes: c.nodes}
}

type nodeClient struct {
	corev1client.NodeInterface
	nodes *Nodes
}

func (c nodeClient) Update(ctx context.Context, node *corev1.Node, opts metav1.UpdateOptions) (*corev1.Node, error) {
	written, err := c.NodeInterface.Update(ctx, node, opts)
	c.nodes.wrote(node.Name, written, err)
	return written, err
}

func (c nodeClient) UpdateStatus(ctx context.Context, node *corev1.Node, opts metav1.UpdateOptions) (*corev1.Node, error) {
	written, err := c.NodeInterface.UpdateStatus(ctx, node, opts)
	c.nodes.wrote(node.Name, written, err)
	return written, err
}

func (c nodeClient) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.Node, error) {
	written, err := c.NodeInterface.Patch(ctx, name, pt, data, opts, subresources...)
	c.nodes.wrote(name, written, err)
	return written, err
}

func (c nodeClient) PatchStatus(ctx context.Context, name string, data []byte) (*corev1.Node, error) {
	written, err := c.NodeInterface.PatchStatus(ctx, name, data)
	c.nodes.wrote(name, written, err)
	return written, err
}
