package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// TestRotatedCredentialsAreTakenUpWithoutARestart rotates the tokens of the CCM's IronCore and
// target cluster kubeconfigs under a running leader, as a platform does (new token written to
// the mounted file, old one revoked): new Services get addresses and new Nodes are initialized,
// no Service is told of an authorization failure, and the leader keeps its lease. A kubeconfig
// replaced by garbage is reported and the credentials before keep working.
func TestRotatedCredentialsAreTakenUpWithoutARestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path, targetPath := filepath.Join(dir, "ironcore.kubeconfig"), filepath.Join(dir, "target.kubeconfig")
	revokeFirst := stack.WriteIronCoreTokenKubeconfigForTest(t, path)
	revokeFirstTarget := stack.WriteTargetTokenKubeconfigForTest(t, targetPath)
	ccm := startCCM(t, "ccm-rotation", append(leaderElectionArgs(), "--ironcore-kubeconfig="+path, "--kubeconfig="+targetPath)...)
	waitForLeader(t, ccm)
	lease, err := stack.TargetClientset.CoordinationV1().Leases("kube-system").Get(ctx, "cloud-controller-manager", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	runningMachine(t, "rotation-1", testenv.MachineOptions{})
	createNode(t, "rotation-1", testenv.NodeOptions{})
	waitForNode(t, "rotation-1", "Node rotation-1 to be initialized", initialized)
	waitForIngress(t, createService(t, "before-rotation", testenv.ServiceOptions{}), anyIngress)

	rotated := time.Now()
	stack.WriteIronCoreTokenKubeconfigForTest(t, path)
	stack.WriteTargetTokenKubeconfigForTest(t, targetPath)
	revokeFirst()
	revokeFirstTarget()
	after := createService(t, "after-rotation", testenv.ServiceOptions{})
	waitForIngress(t, after, anyIngress)
	runningMachine(t, "rotation-2", testenv.MachineOptions{})
	createNode(t, "rotation-2", testenv.NodeOptions{})
	waitForNode(t, "rotation-2", "Node rotation-2 to be initialized", initialized)
	for _, kubeconfig := range []string{"ironcore", "target"} {
		if !strings.Contains(readLog(ccm), `"Reloaded kubeconfig: requests now use its credentials" kubeconfig="`+kubeconfig+`"`) {
			t.Errorf("the CCM did not log that it reloaded its %s kubeconfig", kubeconfig)
		}
	}
	requireNoAuthorizationFailures(t, rotated)
	now, err := stack.TargetClientset.CoordinationV1().Leases("kube-system").Get(ctx, "cloud-controller-manager", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *now.Spec.HolderIdentity != *lease.Spec.HolderIdentity || *now.Spec.LeaseTransitions != *lease.Spec.LeaseTransitions {
		t.Errorf("the lease went from %s (transitions %d) to %s (transitions %d); want the leader kept",
			*lease.Spec.HolderIdentity, *lease.Spec.LeaseTransitions, *now.Spec.HolderIdentity, *now.Spec.LeaseTransitions)
	}

	// Garbage in the file: reported, and the second token keeps working.
	if err := os.WriteFile(path+".new", []byte("{not a kubeconfig"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	testenv.Await(t, ctx, waitTimeout, "the CCM to report the unusable kubeconfig", func(context.Context) error {
		if !strings.Contains(readLog(ccm), "Cannot use the changed kubeconfig") {
			return errors.New("not reported yet")
		}
		return nil
	})
	waitForIngress(t, createService(t, "after-garbage", testenv.ServiceOptions{}), anyIngress)
	requireNoAuthorizationFailures(t, rotated)
}

// requireNoAuthorizationFailures fails the test for any event since since, on any object of
// the target cluster, that reports IronCore refusing the CCM's credentials.
func requireNoAuthorizationFailures(t *testing.T, since time.Time) {
	t.Helper()
	events, err := stack.TargetClientset.CoreV1().Events(corev1.NamespaceAll).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, event := range events.Items {
		last := event.LastTimestamp.Time
		if last.IsZero() {
			last = event.EventTime.Time
		}
		if last.Before(since.Truncate(time.Second)) {
			continue
		}
		if message := strings.ToLower(event.Message); strings.Contains(message, "unauthorized") || strings.Contains(message, "401") {
			t.Errorf("event %s on %s %s/%s: %s", event.Reason, event.InvolvedObject.Kind, event.InvolvedObject.Namespace, event.InvolvedObject.Name, event.Message)
		}
	}
}
