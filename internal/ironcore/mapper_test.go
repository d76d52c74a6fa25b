package ironcore

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// countingMapper answers from a DefaultRESTMapper and counts the questions; it knows a kind
// only once taught, as discovery learns of a kind that appears later.
type countingMapper struct {
	*meta.DefaultRESTMapper
	asked int
}

func (c *countingMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	c.asked++
	return c.DefaultRESTMapper.RESTMapping(gk, versions...)
}

// TestMemoMapperRemembersFoundMappingsOnly: a found mapping is asked for once; a kind not
// found is asked for again, so that it is found once it exists.
func TestMemoMapperRemembersFoundMappingsOnly(t *testing.T) {
	gv := schema.GroupVersion{Group: "networking.ironcore.dev", Version: "v1alpha1"}
	underlying := &countingMapper{DefaultRESTMapper: meta.NewDefaultRESTMapper([]schema.GroupVersion{gv})}
	underlying.Add(gv.WithKind("NetworkInterface"), meta.RESTScopeNamespace)
	m := newMemoMapper(underlying)

	nic := schema.GroupKind{Group: gv.Group, Kind: "NetworkInterface"}
	for range 3 {
		mapping, err := m.RESTMapping(nic, gv.Version)
		if err != nil || mapping.Scope.Name() != meta.RESTScopeNameNamespace {
			t.Fatalf("RESTMapping = %v, %v; want the namespaced mapping", mapping, err)
		}
	}
	if underlying.asked != 1 {
		t.Errorf("asked the underlying mapper %d times for one kind, want 1", underlying.asked)
	}

	later := schema.GroupKind{Group: gv.Group, Kind: "LoadBalancer"}
	if _, err := m.RESTMapping(later, gv.Version); !meta.IsNoMatchError(err) {
		t.Fatalf("RESTMapping of an unknown kind = %v, want no match", err)
	}
	underlying.Add(gv.WithKind("LoadBalancer"), meta.RESTScopeNamespace)
	if _, err := m.RESTMapping(later, gv.Version); err != nil {
		t.Fatalf("RESTMapping of a kind that appeared since = %v, want it found", err)
	}
}
