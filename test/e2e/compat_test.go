package e2e

import (
	"os"
	"testing"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// TestTheTargetClusterRunsTheChosenKubernetes: the target cluster's API server is of the minor
// version testenv.TargetKubernetesEnv names (make test-compat), or of the servers module's
// kube-apiserver, so that the tests beside it ran against that version. A kube-apiserver built
// from its module reports no git version; its emulated version is its own minor version.
func TestTheTargetClusterRunsTheChosenKubernetes(t *testing.T) {
	info, err := stack.TargetClientset.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	got := info.EmulationMajor + "." + info.EmulationMinor
	if info.EmulationMajor == "" {
		got = info.Major + "." + info.Minor
	}
	want := os.Getenv(testenv.TargetKubernetesEnv)
	if want == "" {
		want = testenv.DefaultTargetKubernetes()
	}
	t.Logf("the target cluster runs Kubernetes %s (%s=%q)", got, testenv.TargetKubernetesEnv, os.Getenv(testenv.TargetKubernetesEnv))
	if got != want {
		t.Errorf("the target cluster's API server is Kubernetes %s, want %s", got, want)
	}
}
