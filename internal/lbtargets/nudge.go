package lbtargets

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
)

// The nudge: IronCore v0.5.0 misses target label changes for a selecting LoadBalancer unless
// the LoadBalancer itself changes, so the controller writes a digest of its targets on it.

// syncNudge nudges the selecting LoadBalancers for the targets the last label sync left.
func (t *Controller) syncNudge(ctx context.Context) error {
	t.labels.mu.Lock()
	want := maps.Clone(t.labels.labelled)
	t.labels.mu.Unlock()
	if want == nil {
		return nil
	}
	return t.nudgeSelecting(ctx, want)
}

// nudgeSelecting writes the digest of the targets on every selecting LoadBalancer of the
// cluster that does not carry it yet, if a LoadBalancer on the Network does not select.
// IronCore v0.5.0, looking for the LoadBalancers a NetworkInterface change concerns, stops at
// the first LoadBalancer on the Network without a selector (a Local Service's, or one of a CCM
// in explicit mode): while one exists, selecting LoadBalancers may miss a target that is
// labelled, unlabelled, or gains or loses its addresses, and the digest makes IronCore
// recompute their routings. IronCore must see the labels before the digest, or it recomputes
// from the old ones: the nudge waits until this process's cache shows its own label writes.
func (t *Controller) nudgeSelecting(ctx context.Context, targets map[string]bool) error {
	lbs, err := t.ironcore.LoadBalancers(ctx)
	if err != nil {
		return err
	}
	mixed := false
	var selecting []*networkingv1alpha1.LoadBalancer
	for i := range lbs {
		lb := &lbs[i]
		switch {
		case lb.Spec.NetworkRef.Name != t.network || lb.DeletionTimestamp != nil:
		case lb.Spec.NetworkInterfaceSelector == nil:
			mixed = true
		case lb.Labels[keys.LabelClusterName] == t.cluster && lb.Spec.NetworkInterfaceSelector.MatchLabels[keys.LabelLoadBalancerTarget] == t.cluster:
			selecting = append(selecting, lb)
		}
	}
	if !mixed || len(selecting) == 0 {
		return nil
	}
	// Removals are waited for like additions: a digest written while the cache still shows a
	// label just removed would have IronCore recompute from the old labels, and later syncs,
	// computing the same digest, would not nudge again.
	if name := t.ironcore.NetworkInterfaceLabelBehind(ctx, keys.LabelLoadBalancerTarget); name != "" {
		return fmt.Errorf("%w: the target label of NetworkInterface %s", errCacheBehind, name)
	}
	digest, err := t.targetsDigest(ctx, targets)
	if err != nil {
		return err
	}
	var errs []error
	for _, lb := range selecting {
		if t.nudgedDigest(lb) == digest {
			continue
		}
		written, err := t.ironcore.AnnotateLoadBalancer(ctx, lb, keys.AnnotationTargets, digest)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		t.labels.mu.Lock()
		if t.labels.nudged == nil {
			t.labels.nudged = map[types.UID]writtenDigest{}
		}
		t.labels.nudged[lb.UID] = writtenDigest{digest: digest, resourceVersion: written.ResourceVersion}
		t.labels.mu.Unlock()
		if t.deletedMeanwhile(ctx, lb) {
			t.forgetNudged(lb.UID)
		}
	}
	return errors.Join(errs...)
}

func (t *Controller) forgetNudged(uid types.UID) {
	t.labels.mu.Lock()
	defer t.labels.mu.Unlock()
	delete(t.labels.nudged, uid)
}

// nudgedDigest is the digest lb carries as this process knows it newest.
func (t *Controller) nudgedDigest(lb *networkingv1alpha1.LoadBalancer) string {
	t.labels.mu.Lock()
	defer t.labels.mu.Unlock()
	if written, ok := t.labels.nudged[lb.UID]; ok {
		if ironcore.NewerVersion(written.resourceVersion, lb.ResourceVersion) {
			return written.digest
		}
		delete(t.labels.nudged, lb.UID)
	}
	return lb.Annotations[keys.AnnotationTargets]
}

// targetsDigest identifies the targets as IronCore routes them: by name, state and
// addresses, as the cache shows them, once it shows this process's writes of each; and the
// labels put back so far, each of which IronCore must be nudged for too.
func (t *Controller) targetsDigest(ctx context.Context, targets map[string]bool) (string, error) {
	entries := make([]string, 0, len(targets))
	for name := range targets {
		if t.ironcore.NetworkInterfaceCacheBehind(ctx, name) {
			return "", fmt.Errorf("%w: NetworkInterface %s", errCacheBehind, name)
		}
		nic, err := t.ironcore.NetworkInterface(ctx, name)
		if errors.Is(err, ironcore.ErrNotFound) {
			continue
		}
		if err != nil {
			return "", err
		}
		entry := nic.Name + "=" + string(nic.Status.State)
		for _, ip := range nic.Status.IPs {
			entry += "," + ip.String()
		}
		entries = append(entries, entry)
	}
	t.labels.mu.Lock()
	if t.labels.repairs > 0 {
		// With this process's mark: another replica's count of repairs may be the same number.
		entries = append(entries, "repairs="+strconv.Itoa(t.labels.repairs)+"@"+t.labels.process)
	}
	t.labels.mu.Unlock()
	slices.Sort(entries)
	hash := sha256.Sum256([]byte(strings.Join(entries, ";")))
	return hex.EncodeToString(hash[:8]), nil
}
