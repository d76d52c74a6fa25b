package bench

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// cpuProfileSeconds is the length of each CPU profile taken while the burst converges; they
// are merged with `go tool pprof -proto <dir>/cpu-*.pb.gz`.
const cpuProfileSeconds = 5

// profileFlags let anyone take the CCM's profiles from its secure port, which the bench's CCM
// serves on loopback only.
const profileFlags = " --authorization-always-allow-paths=/healthz,/readyz,/livez,/debug/pprof/*,/metrics"

// profiler takes the CCM's profiles from its secure port.
type profiler struct {
	dir    string
	url    string
	client *http.Client
}

// newProfiler waits until the CCM serves its profiles on port.
func newProfiler(ctx context.Context, port int, dir string) (*profiler, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	p := &profiler{dir: dir, url: fmt.Sprintf("https://127.0.0.1:%d/", port), client: &http.Client{
		// The CCM's serving certificate is self-signed.
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // loopback, profiles only
	}}
	return p, testenv.WaitFor(ctx, time.Minute, "the CCM to serve its profiles", func(ctx context.Context) error {
		return p.fetch(ctx, "debug/pprof/heap", "heap-start.pb.gz")
	})
}

// cpuUntil takes CPU profiles one after another until ctx ends, each followed by a heap
// profile (what the heap held at the last collection: the peak is in one of them), and
// returns when the last one is written.
func (p *profiler) cpuUntil(ctx context.Context) <-chan error {
	done := make(chan error, 1)
	go func() {
		for i := 0; ctx.Err() == nil; i++ {
			if err := p.fetch(context.WithoutCancel(ctx), fmt.Sprintf("debug/pprof/profile?seconds=%d", cpuProfileSeconds), fmt.Sprintf("cpu-%02d.pb.gz", i)); err != nil {
				done <- err
				return
			}
			if err := p.heap(context.WithoutCancel(ctx), fmt.Sprintf("heap-%02d.pb.gz", i)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	return done
}

// heap writes the CCM's heap profile as name.
func (p *profiler) heap(ctx context.Context, name string) error {
	return p.fetch(ctx, "debug/pprof/heap", name)
}

// metrics writes the CCM's metrics as metrics.txt: among them, how long its requests waited
// for their clients' rate limits (rest_client_rate_limiter_duration_seconds, by host).
func (p *profiler) metrics(ctx context.Context) error {
	return p.fetch(ctx, "metrics", "metrics.txt")
}

func (p *profiler) fetch(ctx context.Context, path, name string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+path, nil)
	if err != nil {
		return err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return fmt.Errorf("take the CCM's %s: %w", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("take the CCM's %s: %s: %s", path, resp.Status, body)
	}
	out, err := os.Create(filepath.Join(p.dir, name))
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, resp.Body); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}
