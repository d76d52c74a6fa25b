package ironcore

import (
	"strings"
	"testing"
)

func TestMachineNamedBy(t *testing.T) {
	for _, tc := range []struct {
		providerID, machine, notOurs string
	}{
		{providerID: ""},
		{providerID: "ironcore://tenant/worker-1", machine: "worker-1"},
		{providerID: "ironcore://other/worker-1", notOurs: `is in IronCore namespace "other", but this cluster's namespace is "tenant"`},
		{providerID: "aws:///eu-west-1a/i-0123", notOurs: "is not of the form ironcore://"},
		{providerID: "ironcore://tenant/Worker", notOurs: "invalid machine name"},
	} {
		machine, notOurs := machineNamedBy(tc.providerID, "tenant")
		if machine != tc.machine || (tc.notOurs == "") != (notOurs == "") || !strings.Contains(notOurs, tc.notOurs) {
			t.Errorf("machineNamedBy(%q) = %q, %q; want %q and a reason containing %q", tc.providerID, machine, notOurs, tc.machine, tc.notOurs)
		}
	}
}
