package ironcore

import (
	"maps"
	"slices"
	"strconv"
	"testing"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// fakeInformer keeps the handlers added to it, so that a test can hand them events.
type fakeInformer struct {
	cache.Informer
	handlers []toolscache.ResourceEventHandler
}

func (f *fakeInformer) AddEventHandler(handler toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	f.handlers = append(f.handlers, handler)
	return nil, nil
}

func (f *fakeInformer) update(old, obj any) {
	for _, handler := range f.handlers {
		handler.OnUpdate(old, obj)
	}
}

func (f *fakeInformer) delete(obj any) {
	for _, handler := range f.handlers {
		handler.OnDelete(obj)
	}
}

func objectMeta(name, uid, resourceVersion string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid), ResourceVersion: resourceVersion}
}

// TestTheWritesOfDeletedNetworkInterfacesAreForgotten: a NetworkInterface deleted before the
// cache showed this writer's last write of it, as a relist after a lost watch finds it, leaves
// no record of that write behind; the write to a newer NetworkInterface of the name stays.
func TestTheWritesOfDeletedNetworkInterfacesAreForgotten(t *testing.T) {
	w := &nicWriter{}
	informer := &fakeInformer{}
	if err := w.watch(informer); err != nil {
		t.Fatal(err)
	}
	nic := func(name, uid, resourceVersion string) *networkingv1alpha1.NetworkInterface {
		return &networkingv1alpha1.NetworkInterface{ObjectMeta: objectMeta(name, uid, resourceVersion)}
	}
	w.remember(nic("deleted", "1", "10"))
	w.remember(nic("relisted", "2", "11"))
	w.remember(nic("recreated", "3", "12"))
	w.remember(nic("behind", "4", "13"))

	informer.delete(nic("deleted", "1", "9"))
	informer.delete(toolscache.DeletedFinalStateUnknown{Key: "ns/relisted", Obj: nic("relisted", "2", "9")})
	informer.delete(nic("recreated", "old", "5"))
	informer.update(nic("behind", "4", "9"), nic("behind", "4", "12"))

	if got, want := slices.Sorted(slices.Values(w.writtenNames())), []string{"behind", "recreated"}; !slices.Equal(got, want) {
		t.Errorf("writes remembered of %v, want %v", got, want)
	}
}

// TestLabelWritesAreForgottenOnceCachedOrDeleted: AddLabel's record of a write is dropped when
// the cache shows the write, or the object deleted, whether or not AddLabel is asked about the
// object again; a cache still behind, or the deletion of an older object of the name, keeps it.
func TestLabelWritesAreForgottenOnceCachedOrDeleted(t *testing.T) {
	w := &labelWrites{}
	informer := &fakeInformer{}
	if err := w.watch("Machine", informer); err != nil {
		t.Fatal(err)
	}
	machine := func(name, uid, resourceVersion string) *computev1alpha1.Machine {
		return &computev1alpha1.Machine{ObjectMeta: objectMeta(name, uid, resourceVersion)}
	}
	for i, name := range []string{"cached", "behind", "deleted", "relisted", "recreated"} {
		w.record("Machine", machine(name, name, strconv.Itoa(10+i)), "key", "value")
	}

	informer.update(machine("cached", "cached", "9"), machine("cached", "cached", "10"))
	informer.update(machine("behind", "behind", "9"), machine("behind", "behind", "9"))
	informer.delete(machine("deleted", "deleted", "9"))
	informer.delete(toolscache.DeletedFinalStateUnknown{Key: "ns/relisted", Obj: machine("relisted", "relisted", "9")})
	informer.delete(machine("recreated", "old", "5"))

	want := []string{"Machine/ns/behind", "Machine/ns/recreated"}
	if got := slices.Sorted(maps.Keys(w.versions)); !slices.Equal(got, want) {
		t.Errorf("writes remembered of %v, want %v", got, want)
	}
}
