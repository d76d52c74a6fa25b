// Package credentials keeps a running client's kubeconfig credentials current. Platforms rotate
// the token behind a mounted kubeconfig (a Secret updated in place, the old token revoked); a
// client that read the file once gets 401 on every request until it is restarted.
//
// A Transport is the bottom of every client built from its Config: it sends each request with
// the credentials of the kubeconfig as last proven, and reads the file again when it changes
// and when the server answers 401. A new kubeconfig replaces the old one only once a request
// with it authenticates; until then the old one keeps working.
package credentials

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/metrics"
)

// Load turns a kubeconfig's contents into the client configuration to use, or says why they
// cannot be used.
type Load func(contents []byte) (*rest.Config, error)

// Parse reads a kubeconfig's contents as client-go reads the file at path: file names in it are
// relative to the file's directory.
func Parse(path string, contents []byte) (*clientcmdapi.Config, error) {
	raw, err := clientcmd.Load(contents)
	if err != nil {
		return nil, err
	}
	for _, cluster := range raw.Clusters {
		cluster.LocationOfOrigin = path
	}
	for _, user := range raw.AuthInfos {
		user.LocationOfOrigin = path
	}
	return raw, clientcmd.ResolveLocalPaths(raw)
}

// recheckPeriod backs up the file watch: a watch can miss a change on some file systems.
const recheckPeriod = time.Minute

// Transport sends requests with the current credentials of one kubeconfig file.
type Transport struct {
	// name says which kubeconfig it is in logs and metrics ("ironcore", "target").
	name, path string
	load       Load
	// probe is the path of a GET that any identity allowed to use the API may make: a new
	// kubeconfig is proven when it is answered with anything but 401.
	probe string
	host  string

	current atomic.Pointer[generation]
	// mu serializes reloads; rejected is the last contents that could not be used, reported
	// once and not tried again until the file changes.
	mu       sync.Mutex
	rejected []byte
}

// generation is one kubeconfig's contents and the transport that sends with its credentials.
type generation struct {
	contents  []byte
	cfg       *rest.Config
	transport http.RoundTripper
	// base is the *http.Transport at the bottom of transport, if it is one (see FenceWrites).
	base *http.Transport
}

// newGeneration builds the transport that sends with cfg's credentials.
func newGeneration(contents []byte, cfg *rest.Config) (*generation, error) {
	g := &generation{contents: contents, cfg: cfg}
	capturing := rest.CopyConfig(cfg)
	// The innermost wrapper is given the base transport.
	capturing.Wrap(func(base http.RoundTripper) http.RoundTripper {
		g.base, _ = base.(*http.Transport)
		return base
	})
	transport, err := rest.TransportFor(capturing)
	if err != nil {
		return nil, err
	}
	g.transport = transport
	return g, nil
}

// New reads the kubeconfig at path and returns its Transport and the configuration to build
// clients from: the kubeconfig's, with its credentials and TLS settings left to the Transport.
// probe is the path of a GET that tells a kubeconfig's credentials authenticate.
func New(name, path, probe string, load Load) (*Transport, *rest.Config, error) {
	contents, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s kubeconfig: %w", name, err)
	}
	cfg, err := load(contents)
	if err != nil {
		return nil, nil, err
	}
	first, err := newGeneration(contents, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("%s kubeconfig %s: %w", name, path, err)
	}
	t := &Transport{name: name, path: path, load: load, probe: probe, host: cfg.Host}
	t.current.Store(first)
	return t, t.clientConfig(cfg), nil
}

// clientConfig is cfg without what the Transport applies (credentials, TLS, impersonation,
// proxy): client-go refuses TLS settings beside a transport of one's own.
func (t *Transport) clientConfig(cfg *rest.Config) *rest.Config {
	return &rest.Config{
		Host:          cfg.Host,
		APIPath:       cfg.APIPath,
		ContentConfig: cfg.ContentConfig,
		UserAgent:     cfg.UserAgent,
		QPS:           cfg.QPS,
		Burst:         cfg.Burst,
		Timeout:       cfg.Timeout,
		Transport:     t,
	}
}

// RoundTrip sends req with the current credentials. On 401 it reads the kubeconfig again and,
// if that brought other credentials, sends req once more with them: the work in flight is not
// lost to a rotation.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	return t.roundTrip(req, func(g *generation) http.RoundTripper { return g.transport })
}

// roundTrip is RoundTrip over the transport of each generation that via gives.
func (t *Transport) roundTrip(req *http.Request, via func(*generation) http.RoundTripper) (*http.Response, error) {
	used := t.current.Load()
	resp, err := via(used).RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		return resp, err
	}
	t.Reload(req.Context())
	now := t.current.Load()
	if now == used || (req.Body != nil && req.GetBody == nil) {
		return resp, nil
	}
	retry := req.Clone(req.Context())
	if req.GetBody != nil {
		body, bodyErr := req.GetBody()
		if bodyErr != nil {
			return resp, nil //nolint:nilerr // the 401 answers the request that cannot be sent again
		}
		retry.Body = body
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return via(now).RoundTrip(retry)
}

// FenceWrites returns the Transport sending over fence's transports (writegate.Fenceable): the
// write gate fences the connections of each generation's base transport.
func (t *Transport) FenceWrites(fence func(*http.Transport) http.RoundTripper) http.RoundTripper {
	return &fencedTransport{t: t, fence: fence}
}

// fencedTransport is a Transport whose requests go over fence of the current generation's base
// transport, built once per generation.
type fencedTransport struct {
	t     *Transport
	fence func(*http.Transport) http.RoundTripper

	mu        sync.Mutex
	built     *generation
	transport http.RoundTripper
}

func (f *fencedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return f.t.roundTrip(req, f.of)
}

// of returns the transport of g over fenced connections, or g's own if they cannot be made.
func (f *fencedTransport) of(g *generation) http.RoundTripper {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.built == g {
		return f.transport
	}
	f.built, f.transport = g, g.transport
	if g.base == nil {
		klog.InfoS("Writes are not fenced on the wire: the kubeconfig's base transport is not an *http.Transport", "kubeconfig", f.t.name)
		return f.transport
	}
	if fenced := f.fence(g.base); fenced != nil {
		transport, err := rest.HTTPWrappersForConfig(g.cfg, fenced)
		if err != nil {
			klog.ErrorS(err, "Writes are not fenced on the wire", "kubeconfig", f.t.name)
			return f.transport
		}
		f.transport = transport
	}
	return f.transport
}

// Reload reads the kubeconfig again and, if it changed and its credentials authenticate, sends
// from now on with them. A kubeconfig that cannot be used is logged and counted once, and the
// current credentials stay.
func (t *Transport) Reload(ctx context.Context) {
	t.mu.Lock()
	defer t.mu.Unlock()
	contents, err := os.ReadFile(t.path)
	if err != nil {
		t.reject(nil, fmt.Errorf("read it: %w", err))
		return
	}
	if bytes.Equal(contents, t.current.Load().contents) || bytes.Equal(contents, t.rejected) {
		return
	}
	cfg, err := t.load(contents)
	if err == nil && cfg.Host != t.host {
		err = fmt.Errorf("it names server %s, not %s, which the running clients use; restart to move to another server", cfg.Host, t.host)
	}
	var next *generation
	if err == nil {
		next, err = newGeneration(contents, cfg)
	}
	if err == nil {
		err = t.prove(ctx, next.transport)
	}
	if err != nil {
		t.reject(contents, err)
		return
	}
	t.current.Store(next)
	t.rejected = nil
	metrics.KubeconfigReloads.WithLabelValues(t.name, "reloaded").Inc()
	klog.InfoS("Reloaded kubeconfig: requests now use its credentials", "kubeconfig", t.name, "path", t.path)
}

// reject reports a kubeconfig that cannot be used; contents is remembered so that it is
// reported once, unless the reason may pass (nil: the file could not be read).
func (t *Transport) reject(contents []byte, err error) {
	var transient *transientError
	if errors.As(err, &transient) {
		contents = nil
	}
	t.rejected = contents
	metrics.KubeconfigReloads.WithLabelValues(t.name, "failed").Inc()
	klog.ErrorS(err, "Cannot use the changed kubeconfig; the credentials read before stay in use", "kubeconfig", t.name, "path", t.path)
}

// transientError is a failure to prove a kubeconfig that may pass: the server did not answer.
type transientError struct{ err error }

func (e *transientError) Error() string { return e.err.Error() }
func (e *transientError) Unwrap() error { return e.err }

// prove sends the probe with transport: anything but 401 means its credentials authenticate.
func (t *Transport) prove(ctx context.Context, transport http.RoundTripper) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.host+t.probe, nil)
	if err != nil {
		return err
	}
	resp, err := transport.RoundTrip(req)
	if err != nil {
		return &transientError{fmt.Errorf("prove its credentials: %w", err)}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized {
		return fmt.Errorf("its credentials are refused (401 on GET %s)", t.probe)
	}
	return nil
}

// Watch reloads the kubeconfig whenever it changes, and every minute in case a change was
// missed, until ctx ends. The file is watched, not its directory, which may be busy (logs beside
// a kubeconfig outside a Pod). A file replaced rather than written (a mounted Secret's update
// swaps a link to a new copy; an editor renames one over it) ends the watch on the old copy:
// it is put on the new one.
func (t *Transport) Watch(ctx context.Context) error {
	watcher, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s kubeconfig: %w", t.name, err)
	}
	if err := watcher.Add(t.path); err != nil {
		_ = watcher.Close()
		return fmt.Errorf("watch %s kubeconfig: %w", t.name, err)
	}
	go func() {
		defer func() { _ = watcher.Close() }()
		for {
			select {
			case <-ctx.Done():
				return
			case event, ok := <-watcher.Events:
				if !ok {
					return
				}
				if event.Has(fsnotify.Remove) || event.Has(fsnotify.Rename) {
					if err := watcher.Add(t.path); err != nil {
						klog.ErrorS(err, "Cannot watch the replaced kubeconfig; it is still read every minute", "kubeconfig", t.name, "path", t.path)
					}
				}
				t.Reload(ctx)
			case err, ok := <-watcher.Errors:
				if !ok {
					return
				}
				klog.ErrorS(err, "Watching the kubeconfig; it is still read every minute", "kubeconfig", t.name, "path", t.path)
			}
		}
	}()
	go wait.UntilWithContext(ctx, t.Reload, recheckPeriod)
	return nil
}
