package ironcore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// TestALoadBalancerThisClientDeletedShowsAsBeingDeleted deletes a LoadBalancer while the
// cache's watch of LoadBalancers is held back, so that the cache still holds it as it was:
// every cached read shows it as being deleted, never as one that serves. Once the cache shows
// the delete, a namesake created since reads as it is.
func TestALoadBalancerThisClientDeletedShowsAsBeingDeleted(t *testing.T) {
	ctx, c := stack.StartIronCoreClientForTest(t, nil)
	owner := ironcore.Owner{Cluster: stack.ClusterName, Namespace: "default", Name: "deleted", UID: "deleted-uid"}
	lb := stack.OwnedLoadBalancer("deleted-by-this-client", owner, stack.Network)
	stack.CreateIronCoreForTest(t, lb)
	waitCached(t, ctx, "the LoadBalancer", c.LoadBalancer, lb.Name)

	release := stack.IronCoreProxy.HoldWatches("loadbalancers.networking.ironcore.dev")
	defer release()
	if err := c.DeleteLoadBalancer(ctx, lb); err != nil {
		t.Fatal(err)
	}
	// IronCore's controllers finish the delete; the cache does not see it.
	testenv.Await(t, ctx, time.Minute, "the LoadBalancer gone from the API server", func(ctx context.Context) error {
		if _, err := c.LiveLoadBalancer(ctx, lb.Name); !errors.Is(err, ironcore.ErrNotFound) {
			return errors.Join(err, errors.New("still there"))
		}
		return nil
	})
	cached, err := c.LoadBalancer(ctx, lb.Name)
	if err != nil {
		t.Fatalf("the held cache no longer holds the LoadBalancer (%v); the test needs it behind", err)
	}
	if cached.DeletionTimestamp == nil {
		t.Error("LoadBalancer shows the deleted LoadBalancer as one that serves")
	}
	ofService, err := c.LoadBalancersOfService(ctx, types.UID(owner.UID))
	if err != nil {
		t.Fatal(err)
	}
	all, err := c.LoadBalancers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for what, list := range map[string][]networkingv1alpha1.LoadBalancer{"LoadBalancersOfService": ofService, "LoadBalancers": all} {
		for _, listed := range list {
			if listed.UID == lb.UID && listed.DeletionTimestamp == nil {
				t.Errorf("%s shows the deleted LoadBalancer as one that serves", what)
			}
		}
	}

	// A namesake made by someone else once the cache has caught up is no delete of this client's.
	release()
	testenv.Await(t, ctx, time.Minute, "the cache to show the delete", func(ctx context.Context) error {
		if _, err := c.LoadBalancer(ctx, lb.Name); !errors.Is(err, ironcore.ErrNotFound) {
			return errors.New("still cached")
		}
		return nil
	})
	namesake := stack.OwnedLoadBalancer(lb.Name, owner, stack.Network)
	stack.CreateIronCoreForTest(t, namesake)
	testenv.Await(t, ctx, time.Minute, "the namesake in the cache", func(ctx context.Context) error {
		cached, err := c.LoadBalancer(ctx, lb.Name)
		switch {
		case err != nil:
			return err
		case cached.UID != namesake.UID:
			return errors.New("not yet the namesake")
		case cached.DeletionTimestamp != nil:
			t.Fatal("the namesake shows as being deleted")
		}
		return nil
	})
}
