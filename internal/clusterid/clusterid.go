// Package clusterid holds the identity of the target cluster: the UID of its kube-system
// namespace. Unlike the cluster name, which is free-form configuration and often left at
// Kubernetes' default, this UID is unique to one cluster and cannot be chosen, so the CCM marks
// the IronCore LoadBalancers it manages with it and deletes nothing that lacks its mark.
package clusterid

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// Namespace is the namespace whose UID identifies the cluster: every cluster has it, and it
// is never deleted or re-created.
const Namespace = "kube-system"

// ID is the cluster's identity once it is known. The zero value is not usable; use New.
type ID struct {
	once  sync.Once
	value string
	known chan struct{}
}

// New returns an identity that is not known yet.
func New() *ID {
	return &ID{known: make(chan struct{})}
}

// Known returns the identity, a UID, if it is known. A nil ID is never known.
func (id *ID) Known() (string, bool) {
	if id == nil {
		return "", false
	}
	select {
	case <-id.known:
		return id.value, true
	default:
		return "", false
	}
}

// Ready is closed once the identity is known; for a nil ID, never.
func (id *ID) Ready() <-chan struct{} {
	if id == nil {
		return nil
	}
	return id.known
}

// Set records the identity. Only the first value counts: the identity of a running cluster
// does not change.
func (id *ID) Set(uid string) {
	id.once.Do(func() {
		id.value = uid
		close(id.known)
	})
}

// ClientName is the name the CCM's target-cluster client for reading the identity has; with
// --use-service-account-credentials it is also the name of its ServiceAccount in kube-system.
const ClientName = "ironcore-cluster-identity"

// Clients makes target-cluster clients; the cloud provider's ControllerClientBuilder is one.
type Clients interface {
	Client(name string) (kubernetes.Interface, error)
}

// Resolve reads the UID of the kube-system namespace, retrying with a growing delay until it
// succeeds or ctx ends, and records it.
func (id *ID) Resolve(ctx context.Context, clients Clients) error {
	backoff := wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: time.Minute}
	attempts := 0
	err := wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		attempts++
		client, err := clients.Client(ClientName)
		if err != nil {
			klog.ErrorS(err, "Cannot make a client to read the cluster's identity", "attempt", attempts)
			return false, nil
		}
		namespace, err := client.CoreV1().Namespaces().Get(ctx, Namespace, metav1.GetOptions{})
		if err != nil {
			// Each failure is logged: a refused request means the CCM's role lacks the rule.
			klog.ErrorS(err, "Cannot read the cluster's identity; LoadBalancers are not marked and no orphan is deleted until it is known",
				"namespace", klog.KRef("", Namespace), "attempt", attempts)
			return false, nil
		}
		if namespace.UID == "" {
			return false, fmt.Errorf("namespace %s has no UID", Namespace)
		}
		id.Set(string(namespace.UID))
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("read the UID of namespace %s: %w", Namespace, err)
	}
	value, _ := id.Known()
	klog.InfoS("Read the cluster's identity", "namespace", klog.KRef("", Namespace), "clusterID", value)
	return nil
}
