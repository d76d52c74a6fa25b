package credentials_test

import (
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ironcoreclientset "github.com/ironcore-dev/ironcore/client-go/ironcore/versioned"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/credentials"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/writegate"
)

// closableFence is open until closed.
type closableFence struct{ closed atomic.Bool }

var errFenceClosed = errors.New("the fence is closed")

func (f *closableFence) Deadline() (time.Time, error) {
	if f.closed.Load() {
		return time.Time{}, errFenceClosed
	}
	return time.Now().Add(time.Hour), nil
}

// TestGatedWritesAreFencedOnTheWireWithEveryCredentials gates a client built on a Transport, as
// the IronCore client is: its writes go over the fenced connections of the write gate, with the
// first kubeconfig's token and with the one it is reloaded with, and a write whose deadline
// passes between the gate and its connection (a pause there) is never sent.
func TestGatedWritesAreFencedOnTheWireWithEveryCredentials(t *testing.T) {
	type request struct {
		method, authorization string
		protoMajor            int
	}
	var mu sync.Mutex
	var seen []request
	server := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		seen = append(seen, request{r.Method, r.Header.Get("Authorization"), r.ProtoMajor})
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	server.EnableHTTP2 = true
	server.Config.ErrorLog = log.New(io.Discard, "", 0)
	server.StartTLS()
	defer server.Close()
	writes := func() []request {
		mu.Lock()
		defer mu.Unlock()
		var writes []request
		for _, r := range seen {
			if r.method == http.MethodPatch {
				writes = append(writes, r)
			}
		}
		return writes
	}

	path := filepath.Join(t.TempDir(), "kubeconfig")
	writeKubeconfig := func(token string) {
		t.Helper()
		kubeconfig := clientcmdapi.NewConfig()
		kubeconfig.Clusters["c"] = &clientcmdapi.Cluster{Server: server.URL, CertificateAuthorityData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: server.Certificate().Raw})}
		kubeconfig.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: token}
		kubeconfig.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
		kubeconfig.CurrentContext = "c"
		if err := clientcmd.WriteToFile(*kubeconfig, path); err != nil {
			t.Fatal(err)
		}
	}
	// pause stands for the process stopped between the gate and the connection: the transport's
	// proxy lookup runs there.
	var pause atomic.Bool
	fence := &closableFence{}
	load := func(contents []byte) (*rest.Config, error) {
		cfg, err := clientcmd.RESTConfigFromKubeConfig(contents)
		if err != nil {
			return nil, err
		}
		cfg.Proxy = func(req *http.Request) (*url.URL, error) {
			if pause.Load() && req.Method == http.MethodPatch {
				fence.closed.Store(true)
			}
			return nil, nil
		}
		return cfg, nil
	}

	writeKubeconfig("first")
	transport, cfg, err := credentials.New("ironcore", path, "/version", load)
	if err != nil {
		t.Fatal(err)
	}
	gate := writegate.New(nil)
	cfg.Wrap(gate.Wrap)
	gate.SetFence(fence)
	clientset, err := ironcoreclientset.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	patch := func() error {
		_, err := clientset.NetworkingV1alpha1().LoadBalancers("ns").Patch(t.Context(), "lb", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{})
		return err
	}

	if err := patch(); err != nil {
		t.Fatal(err)
	}
	writeKubeconfig("second")
	transport.Reload(t.Context())
	if err := patch(); err != nil {
		t.Fatal(err)
	}
	// Fenced connections speak HTTP/1.1 only; the client's others HTTP/2.
	if got, want := writes(), []request{{http.MethodPatch, "Bearer first", 1}, {http.MethodPatch, "Bearer second", 1}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the server saw the writes %v, want %v", got, want)
	}

	pause.Store(true)
	if err := patch(); err == nil || !strings.Contains(err.Error(), errFenceClosed.Error()) {
		t.Errorf("a write whose deadline passed before it was sent returned %v, want the fence's refusal", err)
	}
	if n := len(writes()); n != 2 {
		t.Errorf("the server saw %d writes, want only the 2 before the deadline", n)
	}
}
