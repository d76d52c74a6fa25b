package ironcore

import (
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// memoMapper remembers the REST mappings it found: controller-runtime's cache asks for one on
// every read, and building them was 1.4 GB of the 3.2 GB a burst allocated. Misses are not
// kept, so a kind that appears later is still discovered.
type memoMapper struct {
	meta.RESTMapper
	mu       sync.RWMutex
	mappings map[string]*meta.RESTMapping
}

func newMemoMapper(mapper meta.RESTMapper) *memoMapper {
	return &memoMapper{RESTMapper: mapper, mappings: map[string]*meta.RESTMapping{}}
}

func (m *memoMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	key := gk.String() + "/" + strings.Join(versions, ",")
	m.mu.RLock()
	mapping, ok := m.mappings[key]
	m.mu.RUnlock()
	if ok {
		return mapping, nil
	}
	mapping, err := m.RESTMapper.RESTMapping(gk, versions...)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.mappings[key] = mapping
	m.mu.Unlock()
	return mapping, nil
}
