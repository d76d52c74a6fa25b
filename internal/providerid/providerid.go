// Package providerid formats and parses the provider IDs that link a Kubernetes Node to its
// IronCore Machine. The format, ironcore://<namespace>/<machine>, is shared with the reference
// IronCore CCM and stored on every Node; it must never change.
package providerid

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Scheme is the provider name as it appears in provider IDs and in --cloud-provider.
const Scheme = "ironcore"

const prefix = Scheme + "://"

// ID identifies one IronCore Machine.
type ID struct {
	Namespace string
	Machine   string
}

// String formats the ID as ironcore://<namespace>/<machine>.
func (id ID) String() string {
	return prefix + id.Namespace + "/" + id.Machine
}

// Parse reads a provider ID strictly: the scheme must be ironcore, and both the namespace and
// the machine name must be valid object names. Nothing is guessed from a malformed ID, because
// a wrong guess would tie a Node to another Machine.
func Parse(providerID string) (ID, error) {
	rest, ok := strings.CutPrefix(providerID, prefix)
	if !ok {
		return ID{}, fmt.Errorf("provider ID %q is not of the form %s<namespace>/<machine>", providerID, prefix)
	}
	namespace, machine, ok := strings.Cut(rest, "/")
	if !ok || strings.Contains(machine, "/") {
		return ID{}, fmt.Errorf("provider ID %q is not of the form %s<namespace>/<machine>", providerID, prefix)
	}
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return ID{}, fmt.Errorf("provider ID %q has an invalid namespace: %s", providerID, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Label(machine); len(errs) > 0 {
		return ID{}, fmt.Errorf("provider ID %q has an invalid machine name: %s", providerID, strings.Join(errs, "; "))
	}
	return ID{Namespace: namespace, Machine: machine}, nil
}
