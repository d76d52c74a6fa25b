package ironcore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	ironcoreclientset "github.com/ironcore-dev/ironcore/client-go/ironcore/versioned"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/config"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv/apiproxy"
)

// TestListsAndWatchesOutlastAnOutage: a list and a watch of the CCM's informers that start
// while IronCore fails keep trying within the call, and succeed once IronCore is back, instead
// of failing into the reflector's backoff (up to 30 s between attempts).
func TestListsAndWatchesOutlastAnOutage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	options := config.NewOptions()
	options.IronCoreKubeconfig = stack.CCMIronCoreKubeconfig
	cfg, namespace, err := options.IronCoreRESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	clientset, err := ironcoreclientset.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	machines := clientset.ComputeV1alpha1().Machines(namespace)
	lw := ironcore.Reconnecting(&toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
			return machines.List(ctx, options)
		},
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			return machines.Watch(ctx, options)
		},
	}).(toolscache.ListerWatcherWithContext)

	for _, call := range []struct {
		verb string
		do   func() error
	}{
		{"list", func() error {
			list, err := lw.ListWithContext(ctx, metav1.ListOptions{})
			if err == nil {
				if _, ok := list.(*computev1alpha1.MachineList); !ok {
					return fmt.Errorf("listed a %T", list)
				}
			}
			return err
		}},
		{"watch", func() error {
			w, err := lw.WatchWithContext(ctx, metav1.ListOptions{})
			if err == nil {
				w.Stop()
			}
			return err
		}},
	} {
		setProxyMode(t, apiproxy.Fail)
		stack.IronCoreProxy.Reset()
		done := make(chan error, 1)
		go func() { done <- call.do() }()
		// Two attempts: the call has retried at least once.
		testenv.Await(t, ctx, time.Minute, "two "+call.verb+" attempts", func(context.Context) error {
			select {
			case err := <-done:
				t.Fatalf("the %s returned while IronCore failed: %v", call.verb, err)
			default:
			}
			for _, count := range stack.IronCoreProxy.Counts() {
				if count.Verb == call.verb && count.Resource == "machines.compute.ironcore.dev" && count.N >= 2 {
					return nil
				}
			}
			return fmt.Errorf("requests %v", stack.IronCoreProxy.Counts())
		})
		setProxyMode(t, apiproxy.Forward)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("the %s failed after IronCore came back: %v", call.verb, err)
			}
		case <-ctx.Done():
			t.Fatalf("the %s did not return after IronCore came back", call.verb)
		}
	}
}

// TestAWatchNeverAnsweredIsGivenUp: the first watch of the NetworkInterfaces (with the
// WatchList feature, the informer's first list too) hangs unanswered, as behind a connection
// that hangs; the client gives up on it and watches again, and its cache syncs. Without a
// bound on the answer, the informer would wait for good and nothing would ever decide from it.
func TestAWatchNeverAnsweredIsGivenUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), ironcore.WatchAnswerTimeout+time.Minute)
	defer cancel()
	var mu sync.Mutex
	hung := 0
	stack.IronCoreProxy.SetFaults(1, apiproxy.Fault{Kind: apiproxy.Hang, Rate: 1, Match: func(r apiproxy.Request) bool {
		mu.Lock()
		defer mu.Unlock()
		if r.Verb != "watch" || r.Resource != "networkinterfaces.networking.ironcore.dev" || hung > 0 {
			return false
		}
		hung++
		return true
	}})
	t.Cleanup(func() { stack.IronCoreProxy.SetFaults(0) })
	c, err := stack.StartIronCoreClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("the cache did not sync")
	}
	mu.Lock()
	defer mu.Unlock()
	if hung != 1 {
		t.Fatalf("%d watches hung, want 1: the test did not hang the first watch", hung)
	}
}
