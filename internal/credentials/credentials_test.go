package credentials_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	ironcoreclientset "github.com/ironcore-dev/ironcore/client-go/ironcore/versioned"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/config"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/credentials"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/metrics"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

var stack *testenv.Stack

func TestMain(m *testing.M) {
	metrics.Register()
	os.Exit(testenv.Main(m, &stack))
}

// ironcoreClient builds the CCM's IronCore credentials from the kubeconfig at path, as the
// provider does, and a client on them.
func ironcoreClient(t *testing.T, path string) (*credentials.Transport, ironcoreclientset.Interface) {
	t.Helper()
	options := &config.Options{IronCoreKubeconfig: path, IronCoreQPS: 50, IronCoreBurst: 100}
	transport, cfg, namespace, err := options.IronCoreCredentials()
	if err != nil {
		t.Fatal(err)
	}
	if namespace != stack.Namespace {
		t.Fatalf("namespace %q, want the stack's %q", namespace, stack.Namespace)
	}
	clientset, err := ironcoreclientset.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return transport, clientset
}

// readNetwork reads the stack's Network, as a CCM does at work.
func readNetwork(ctx context.Context, clientset ironcoreclientset.Interface) error {
	_, err := clientset.NetworkingV1alpha1().Networks(stack.Namespace).Get(ctx, stack.Network, metav1.GetOptions{})
	return err
}

func reloads(t *testing.T, result string) float64 {
	t.Helper()
	return testenv.Counter(t, metrics.KubeconfigReloads.WithLabelValues("ironcore", result))
}

// TestARevokedTokenIsReplacedOnTheFirstRefusal: the kubeconfig's token is rotated and the old
// one revoked with no watch running; the next request is refused, the kubeconfig read again and
// the request sent again with the new token: the caller sees no error.
func TestARevokedTokenIsReplacedOnTheFirstRefusal(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ironcore.kubeconfig")
	revokeFirst := stack.WriteIronCoreTokenKubeconfigForTest(t, path)
	_, clientset := ironcoreClient(t, path)
	if err := readNetwork(ctx, clientset); err != nil {
		t.Fatalf("read with the first token: %v", err)
	}

	before := reloads(t, "reloaded")
	stack.WriteIronCoreTokenKubeconfigForTest(t, path)
	readAfterRevoking(ctx, t, clientset, revokeFirst, before, "the one of the refused request")
}

// readAfterRevoking revokes the first token, then reads with clientset, which must succeed, and
// checks that one reload was counted since before: why names it.
func readAfterRevoking(ctx context.Context, t *testing.T, clientset ironcoreclientset.Interface, revoke func(), before float64, why string) {
	t.Helper()
	revoke()
	if err := readNetwork(ctx, clientset); err != nil {
		t.Fatalf("read after the rotation: %v; want it sent with the new token", err)
	}
	if got := reloads(t, "reloaded") - before; got != 1 {
		t.Errorf("%v reloads counted, want 1 (%s)", got, why)
	}
}

// watchedClient writes a kubeconfig with a new token to a file of its own and returns the file,
// a client on it whose kubeconfig is watched until ctx ends, and what revokes the token.
func watchedClient(ctx context.Context, t *testing.T) (string, ironcoreclientset.Interface, func()) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ironcore.kubeconfig")
	revoke := stack.WriteIronCoreTokenKubeconfigForTest(t, path)
	transport, clientset := ironcoreClient(t, path)
	if err := transport.Watch(ctx); err != nil {
		t.Fatal(err)
	}
	return path, clientset, revoke
}

// TestAChangedKubeconfigIsReadWhenItChanges: with the watch running, a new kubeconfig is taken
// up before any request needs it, and the old token can be revoked without one refusal.
func TestAChangedKubeconfigIsReadWhenItChanges(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	path, clientset, revokeFirst := watchedClient(ctx, t)
	before := reloads(t, "reloaded")

	stack.WriteIronCoreTokenKubeconfigForTest(t, path)
	if err := testenv.WaitFor(ctx, 30*time.Second, "the changed kubeconfig reloaded", func(context.Context) error {
		if reloads(t, "reloaded") == before {
			return errors.New("not reloaded yet")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	readAfterRevoking(ctx, t, clientset, revokeFirst, before, "the watch's; no request was refused")
}

// TestAMountedSecretsUpdateIsRead: the kubeconfig is a file of a mounted Secret, which the
// kubelet updates by writing a new copy and swapping a link to it; the watch is on the old copy,
// which is then deleted. The new one is read, and watched in turn.
func TestAMountedSecretsUpdateIsRead(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mount, staging := t.TempDir(), filepath.Join(t.TempDir(), "kubeconfig")
	revokeFirst := stack.WriteIronCoreTokenKubeconfigForTest(t, staging)
	project(t, mount, staging, "..2026_11_29_1")
	path := filepath.Join(mount, "kubeconfig")
	if err := os.Symlink(filepath.Join("..data", "kubeconfig"), path); err != nil {
		t.Fatal(err)
	}
	transport, clientset := ironcoreClient(t, path)
	if err := transport.Watch(ctx); err != nil {
		t.Fatal(err)
	}
	for i, version := range []string{"..2026_11_29_2", "..2026_11_29_3"} {
		before := reloads(t, "reloaded")
		revoke := stack.WriteIronCoreTokenKubeconfigForTest(t, staging)
		project(t, mount, staging, version)
		if err := testenv.WaitFor(ctx, 30*time.Second, "the updated Secret's kubeconfig reloaded", func(context.Context) error {
			if reloads(t, "reloaded") == before {
				return errors.New("not reloaded yet")
			}
			return nil
		}); err != nil {
			t.Fatalf("update %d: %v", i+1, err)
		}
		revokeFirst()
		if err := readNetwork(ctx, clientset); err != nil {
			t.Fatalf("read after update %d: %v", i+1, err)
		}
		revokeFirst = revoke
	}
}

// project puts the file source into mount as the kubelet updates a mounted Secret: into a new
// directory named version, then the link ..data swapped to it in one rename, then the old
// directories deleted.
func project(t *testing.T, mount, source, version string) {
	t.Helper()
	contents, err := os.ReadFile(source)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(mount, version), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mount, version, "kubeconfig"), contents, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(version, filepath.Join(mount, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(mount, "..data_tmp"), filepath.Join(mount, "..data")); err != nil {
		t.Fatal(err)
	}
	old, err := filepath.Glob(filepath.Join(mount, "..20*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range old {
		if filepath.Base(dir) != version {
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestAKubeconfigThatCannotBeUsedLeavesTheOldCredentials: garbage, and a kubeconfig whose token
// IronCore refuses, are each reported once and the old credentials stay in use; a good
// kubeconfig after them is taken up.
func TestAKubeconfigThatCannotBeUsedLeavesTheOldCredentials(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	path, clientset, revokeFirst := watchedClient(ctx, t)
	refusedToken := &rest.Config{Host: stack.IronCore.Config.Host, TLSClientConfig: rest.TLSClientConfig{CAData: stack.IronCore.Config.CAData}, BearerToken: "not-a-token"}
	for _, bad := range []struct {
		name  string
		write func(path string) error
	}{
		{"garbage", func(path string) error { return os.WriteFile(path, []byte("{not a kubeconfig"), 0o600) }},
		{"a token IronCore refuses", func(path string) error { return testenv.WriteKubeconfig(path, refusedToken, stack.Namespace) }},
	} {
		failed, reloaded := reloads(t, "failed"), reloads(t, "reloaded")
		if err := bad.write(path + ".new"); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".new", path); err != nil {
			t.Fatal(err)
		}
		if err := testenv.WaitFor(ctx, 30*time.Second, "the failure to use "+bad.name+" counted", func(context.Context) error {
			if reloads(t, "failed") == failed {
				return errors.New("not counted yet")
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := readNetwork(ctx, clientset); err != nil {
			t.Errorf("read after the kubeconfig became %s: %v; want the old credentials kept", bad.name, err)
		}
		if got := reloads(t, "reloaded") - reloaded; got != 0 {
			t.Errorf("%s: %v reloads counted, want none", bad.name, got)
		}
	}

	stack.WriteIronCoreTokenKubeconfigForTest(t, path)
	revokeFirst()
	if err := readNetwork(ctx, clientset); err != nil {
		t.Fatalf("read after a good kubeconfig followed the bad ones: %v", err)
	}
}

// TestParseResolvesFileNamesAgainstTheKubeconfig: a kubeconfig naming its CA file relatively
// means the file beside it, as for client-go reading the file itself.
func TestParseResolvesFileNamesAgainstTheKubeconfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	contents := []byte(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://example.invalid", certificate-authority: ca.crt}
users:
- name: u
  user: {client-certificate: certs/client.crt}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`)
	raw, err := credentials.Parse(path, contents)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := raw.Clusters["c"].CertificateAuthority, filepath.Join(filepath.Dir(path), "ca.crt"); got != want {
		t.Errorf("certificate-authority %q, want %q", got, want)
	}
	if got, want := raw.AuthInfos["u"].ClientCertificate, filepath.Join(filepath.Dir(path), "certs", "client.crt"); got != want {
		t.Errorf("client-certificate %q, want %q", got, want)
	}
}
