// Package ironcore is the CCM's one way to the IronCore API. Reads come from a namespace-scoped
// informer cache; writes, and the few reads that must not trust a cache, go to the API server.
package ironcore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync/atomic"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	ipamv1alpha1 "github.com/ironcore-dev/ironcore/api/ipam/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	ironcoreclientset "github.com/ironcore-dev/ironcore/client-go/ironcore/versioned"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/writegate"
)

// ErrNotFound is wrapped by every error that means the object does not exist.
var ErrNotFound = errors.New("not found")

// The cache's field indexes: the IronCore API server cannot select on these fields.
const (
	indexMachineHostname        = "spec.guestConfig.hostname"
	indexLoadBalancerServiceUID = "loadbalancer-service-uid"
)

// Client reads and writes the IronCore objects of one namespace.
type Client struct {
	namespace string
	cache     cache.Cache
	// api makes all writes, and the reads that must see the latest state.
	api client.Client
	// applier makes the server-side applies: controller-runtime's Apply returns no typed result.
	applier ironcoreclientset.Interface
	waiters loadBalancerWaiters
	// deletedLBs: see deletedLoadBalancers.
	deletedLBs deletedLoadBalancers
	nics       *nicWriter
	// labelled remembers the labels AddLabel wrote on objects other than NetworkInterfaces.
	labelled labelWrites
	// routingsLive and ownRoutings: see ReadRoutingsLive.
	routingsLive          bool
	ownRoutings           toolscache.SharedIndexInformer
	podCIDRPrefixesCached bool
	writeGate             *writegate.Gate
	informers             *informerRegistry
	synced                atomic.Bool
}

// NewScheme returns a scheme with the IronCore API groups the CCM uses.
func NewScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		computev1alpha1.AddToScheme,
		networkingv1alpha1.AddToScheme,
		ipamv1alpha1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	return scheme, nil
}

// NewWithin is New, given up when ctx ends: building the cache makes a request that takes no
// context.
func NewWithin(ctx context.Context, cfg *rest.Config, namespace string) (*Client, error) {
	type built struct {
		client *Client
		err    error
	}
	done := make(chan built, 1)
	go func() {
		client, err := New(cfg, namespace)
		done <- built{client, err}
	}()
	select {
	case b := <-done:
		return b.client, b.err
	case <-ctx.Done():
		return nil, fmt.Errorf("build IronCore cache: %w", ctx.Err())
	}
}

// New builds a client for namespace. Call CheckNetwork to find out whether IronCore is
// reachable, then RegisterInformers, then Start.
func New(cfg *rest.Config, namespace string) (*Client, error) {
	scheme, err := NewScheme()
	if err != nil {
		return nil, fmt.Errorf("build IronCore scheme: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	if cfg.RateLimiter == nil && cfg.QPS >= 0 {
		// One limiter for the whole process, not one per REST client and kind; zero means
		// client-go's default.
		qps, burst := cfg.QPS, cfg.Burst
		if qps == 0 {
			qps, burst = rest.DefaultQPS, rest.DefaultBurst
		}
		cfg.RateLimiter = newPriorityLimiter(qps, burst)
	}
	limiter := cfg.RateLimiter
	if limiter == nil {
		limiter = flowcontrol.NewFakeAlwaysRateLimiter()
	}
	gate := writegate.New(nil)
	cfg.Wrap(gate.Wrap)
	cfg.Wrap(instrument)
	cfg.Wrap(bound)
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("build IronCore HTTP client: %w", err)
	}
	dynamicMapper, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("build IronCore REST mapper: %w", err)
	}
	mapper := newMemoMapper(dynamicMapper)
	api, err := client.New(cfg, client.Options{Scheme: scheme, HTTPClient: httpClient, Mapper: mapper})
	if err != nil {
		return nil, fmt.Errorf("build IronCore client: %w", err)
	}
	applier, err := ironcoreclientset.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("build IronCore clientset: %w", err)
	}
	podCIDRs, err := podCIDRPrefixes()
	if err != nil {
		return nil, err
	}
	informers := &informerRegistry{}
	objectCache, err := cache.New(cfg, cache.Options{
		Scheme:     scheme,
		Mapper:     mapper,
		HTTPClient: httpClient,
		// Cluster-scoped kinds (MachinePool, MachineClass) are not restricted by this.
		DefaultNamespaces: map[string]cache.Config{namespace: {}},
		DefaultTransform:  cache.TransformStripManagedFields(),
		// Of the Prefixes (there is one per NetworkInterface IP), only pod CIDRs are cached.
		ByObject: map[client.Object]cache.ByObject{
			&ipamv1alpha1.Prefix{}:                    {Label: podCIDRs},
			&networkingv1alpha1.LoadBalancerRouting{}: {Transform: summarizeRoutings()},
		},
		// Reading an unregistered kind is a bug, not a reason to start an informer mid-sync.
		ReaderFailOnMissingInformer: true,
		NewInformer:                 informers.newInformer,
	})
	if err != nil {
		return nil, fmt.Errorf("build IronCore cache: cannot reach the IronCore API to look up its resources: %w", err)
	}
	// NetworkInterface patches take their tokens from the limiter before they are built.
	unlimited := rest.CopyConfig(cfg)
	unlimited.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	nicAPI, err := client.New(unlimited, client.Options{Scheme: scheme, HTTPClient: httpClient, Mapper: mapper})
	if err != nil {
		return nil, fmt.Errorf("build IronCore client: %w", err)
	}
	c := &Client{namespace: namespace, cache: objectCache, api: api, applier: applier, writeGate: gate, informers: informers}
	c.nics = nicWriterFor(c, limiter, nicAPI)
	return c, nil
}

// ReadRoutingsLive has routings read from the API server and watches only those the CCM writes
// itself; call it before RegisterInformers. With selectors, IronCore rewrites every other routing
// whenever a target changes: a cache would decode Nodes × Services routings in a burst, for reads
// needed only when a selector moves or a LoadBalancer is deleted.
func (c *Client) ReadRoutingsLive(cluster string) {
	c.routingsLive = true
	selector := labels.SelectorFromSet(labels.Set{keys.LabelRoutingCluster: cluster}).String()
	routings := c.applier.NetworkingV1alpha1().LoadBalancerRoutings(c.namespace)
	c.ownRoutings = toolscache.NewSharedIndexInformer(c.informers.listWatch(&toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
			options.LabelSelector = selector
			return routings.List(ctx, options)
		},
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			options.LabelSelector = selector
			return routings.Watch(ctx, options)
		},
	}, &networkingv1alpha1.LoadBalancerRouting{}), &networkingv1alpha1.LoadBalancerRouting{}, 0, toolscache.Indexers{})
	_ = c.ownRoutings.SetTransform(summarizeRoutings())
}

// CachePodCIDRPrefixes caches pod CIDR Prefixes; call it before RegisterInformers. Without it
// they are read live, which needs no list or watch permission on Prefixes.
func (c *Client) CachePodCIDRPrefixes() { c.podCIDRPrefixesCached = true }

// RegisterInformers creates the informers and indexes, so that they all start together.
func (c *Client) RegisterInformers(ctx context.Context) error {
	if err := c.cache.IndexField(ctx, &computev1alpha1.Machine{}, indexMachineHostname, func(obj client.Object) []string {
		machine := obj.(*computev1alpha1.Machine)
		if machine.Spec.GuestConfig == nil || machine.Spec.GuestConfig.Hostname == "" {
			return nil
		}
		return []string{machine.Spec.GuestConfig.Hostname}
	}); err != nil {
		return fmt.Errorf("index machines by hostname: %w", err)
	}
	if err := c.cache.IndexField(ctx, &networkingv1alpha1.LoadBalancer{}, indexLoadBalancerServiceUID, serviceUIDsOf); err != nil {
		return fmt.Errorf("index load balancers by service UID: %w", err)
	}
	for _, obj := range []client.Object{
		&computev1alpha1.Machine{},
		&computev1alpha1.MachinePool{},
		&networkingv1alpha1.Network{},
		&networkingv1alpha1.NetworkInterface{},
		&networkingv1alpha1.LoadBalancer{},
		&networkingv1alpha1.LoadBalancerRouting{},
		&ipamv1alpha1.Prefix{},
	} {
		if _, routing := obj.(*networkingv1alpha1.LoadBalancerRouting); routing && c.routingsLive {
			continue
		}
		if _, prefix := obj.(*ipamv1alpha1.Prefix); prefix && !c.podCIDRPrefixesCached {
			continue
		}
		if _, err := c.cache.GetInformer(ctx, obj); err != nil {
			return fmt.Errorf("register informer for %T: %w", obj, err)
		}
	}
	informer, err := c.cache.GetInformer(ctx, &networkingv1alpha1.LoadBalancer{})
	if err != nil {
		return fmt.Errorf("register informer for LoadBalancers: %w", err)
	}
	if err := c.watchLoadBalancers(informer); err != nil {
		return err
	}
	if informer, err = c.cache.GetInformer(ctx, &computev1alpha1.Machine{}); err != nil {
		return fmt.Errorf("register informer for Machines: %w", err)
	}
	if err := c.labelled.watch(c.kindOf(&computev1alpha1.Machine{}), informer); err != nil {
		return err
	}
	if informer, err = c.cache.GetInformer(ctx, &networkingv1alpha1.NetworkInterface{}); err != nil {
		return fmt.Errorf("register informer for NetworkInterfaces: %w", err)
	}
	return c.nics.watch(informer)
}

// Namespace is the IronCore namespace this client works in.
func (c *Client) Namespace() string { return c.namespace }

// Start runs the cache and the NetworkInterface writer until ctx ends.
func (c *Client) Start(ctx context.Context) error {
	go c.nics.run(ctx)
	if c.ownRoutings != nil {
		go c.ownRoutings.RunWithContext(ctx)
	}
	go c.WaitForCacheSync(ctx)
	return c.cache.Start(ctx)
}

// WaitForCacheSync blocks until the cache has listed every registered kind, or ctx ends.
func (c *Client) WaitForCacheSync(ctx context.Context) bool {
	if c.ownRoutings != nil && !toolscache.WaitForCacheSync(ctx.Done(), c.ownRoutings.HasSynced) {
		return false
	}
	if !c.cache.WaitForCacheSync(ctx) {
		return false
	}
	c.synced.Store(true)
	return true
}

// HasSynced tells whether the cache has listed every registered kind: until then no decision
// may rest on what it holds.
func (c *Client) HasSynced() bool { return c.synced.Load() }

// CheckNetwork confirms, with a live read, that the API is reachable and the Network exists.
func (c *Client) CheckNetwork(ctx context.Context, name string) error {
	return c.checkExists(ctx, "Network", name, &networkingv1alpha1.Network{})
}

// CheckPrefix confirms, with a live read, that the Prefix exists and is of the IP family.
func (c *Client) CheckPrefix(ctx context.Context, name string, family corev1.IPFamily) error {
	_, err := c.prefixOfFamily(ctx, name, family)
	return err
}

// prefixOfFamily reads the Prefix live and returns it if it is of the IP family.
func (c *Client) prefixOfFamily(ctx context.Context, name string, family corev1.IPFamily) (*ipamv1alpha1.Prefix, error) {
	prefix := &ipamv1alpha1.Prefix{}
	if err := c.checkExists(ctx, "Prefix", name, prefix); err != nil {
		return nil, err
	}
	actual := prefix.Spec.IPFamily
	if actual == "" && prefix.Spec.Prefix != nil {
		actual = corev1.IPv4Protocol
		if prefix.Spec.Prefix.Addr().Is6() {
			actual = corev1.IPv6Protocol
		}
	}
	if actual != "" && actual != family {
		return nil, &WrongFamily{Prefix: c.namespace + "/" + name, Family: actual, Want: family}
	}
	return prefix, nil
}

// WrongFamily is a Prefix of another IP family than the one asked for.
type WrongFamily struct {
	Prefix       string
	Family, Want corev1.IPFamily
}

func (e *WrongFamily) Error() string {
	return fmt.Sprintf("IronCore Prefix %s is %s, not %s", e.Prefix, e.Family, e.Want)
}

// Transient reports whether err may not recur: a 5xx, a 429, or a failed connection. An answer
// about the request, a certificate that does not verify or a name that does not resolve is not.
func Transient(err error) bool {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		code := status.Status().Code
		return code >= http.StatusInternalServerError || code == http.StatusTooManyRequests
	}
	var (
		unknownAuthority x509.UnknownAuthorityError
		hostname         x509.HostnameError
		invalid          x509.CertificateInvalidError
		verification     *tls.CertificateVerificationError
		dns              *net.DNSError
	)
	if errors.As(err, &unknownAuthority) || errors.As(err, &hostname) || errors.As(err, &invalid) || errors.As(err, &verification) ||
		(errors.As(err, &dns) && dns.IsNotFound) {
		return false
	}
	var urlErr *url.Error
	var netErr net.Error
	return errors.As(err, &urlErr) || errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

func (c *Client) checkExists(ctx context.Context, kind, name string, obj client.Object) error {
	err := c.api.Get(ctx, client.ObjectKey{Namespace: c.namespace, Name: name}, obj)
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		return fmt.Errorf("IronCore %s %s/%s: %w", kind, c.namespace, name, ErrNotFound)
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		return fmt.Errorf("IronCore %s %s/%s: the IronCore credentials are not allowed to read it: %w", kind, c.namespace, name, err)
	default:
		return fmt.Errorf("IronCore %s %s/%s: cannot reach the IronCore API: %w", kind, c.namespace, name, err)
	}
}

// getCached reads one object from the cache; namespace is empty for a cluster-scoped one.
func (c *Client) getCached(ctx context.Context, kind, namespace, name string, obj client.Object) error {
	if err := c.cache.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("%s %s: %w", kind, objectKey(namespace, name), ErrNotFound)
		}
		return fmt.Errorf("read %s %s: %w", kind, objectKey(namespace, name), err)
	}
	return nil
}

func objectKey(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// IsNotFound tells whether err means the object does not exist.
func IsNotFound(err error) bool {
	return errors.Is(err, ErrNotFound) || apierrors.IsNotFound(err)
}
