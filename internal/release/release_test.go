package release_test

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/release"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// TestAReleaseIsReproducibleAndRuns builds the release's binaries twice, as make release does,
// and makes a release of each: the two images have one digest; the image runs the CCM as a
// non-root user; the CCM in it prints the commit the test runs from; the tarball holds the same
// image; the chart's appVersion is the binary's version.
func TestAReleaseIsReproducibleAndRuns(t *testing.T) {
	ctx := context.Background()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	chart := filepath.Join(root, "charts", release.CCMBinary)
	var results [2]release.Result
	for i := range results {
		dir := t.TempDir()
		if err := testenv.BuildRelease(ctx, dir); err != nil {
			t.Fatal(err)
		}
		if results[i], err = release.Make(dir, dir, chart, "amd64"); err != nil {
			t.Fatal(err)
		}
	}
	first := results[0]
	if results[1].Digest != first.Digest {
		t.Errorf("two builds of one commit gave two images: %s and %s", first.Digest, results[1].Digest)
	}
	if !strings.HasSuffix(first.Tag, ":"+first.Build.Version) || !strings.HasPrefix(first.Build.Version, "v") {
		t.Errorf("image %s, version %s: the tag is not the binary's version", first.Tag, first.Build.Version)
	}

	index, err := layout.ImageIndexFromPath(first.Layout)
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := index.IndexManifest()
	if err != nil || len(manifest.Manifests) != 1 {
		t.Fatalf("OCI layout index: %+v, %v; want one image", manifest, err)
	}
	if manifest.Manifests[0].Digest.String() != first.Digest {
		t.Errorf("the layout holds %s, the release says %s", manifest.Manifests[0].Digest, first.Digest)
	}
	image, err := index.Image(manifest.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	config, err := image.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := config.Config.Entrypoint; len(got) != 1 || got[0] != "/"+release.CCMBinary {
		t.Errorf("entrypoint %v, want /%s", got, release.CCMBinary)
	}
	if user := config.Config.User; user == "" || user == "0" || user == "root" || strings.HasPrefix(user, "0:") {
		t.Errorf("the image runs as %q, want a non-root user", user)
	}

	fromTarball, err := tarball.ImageFromPath(first.Tarball, nil)
	if err != nil {
		t.Fatal(err)
	}
	// docker load's format has a manifest of its own: the same image is the same configuration,
	// which names every layer by its content.
	tarballID, err := fromTarball.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	if id, err := image.ConfigName(); err != nil || id != tarballID {
		t.Errorf("the tarball holds image %s, the layout %s (%v)", tarballID, id, err)
	}

	ccm := extract(t, mutate.Extract(image), release.CCMBinary)
	output, err := exec.Command(ccm, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("the image's CCM --version: %v\n%s", err, output)
	}
	if !strings.Contains(string(output), first.Build.Commit) || first.Build.Commit == "unknown" {
		t.Errorf("the image's CCM --version does not name commit %s:\n%s", first.Build.Commit, output)
	}

	chartYAML, err := os.ReadFile(filepath.Join(first.Chart, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(chartYAML), "\nappVersion: \""+first.Build.Version+"\"\n") {
		t.Errorf("the release's chart does not have appVersion %s:\n%s", first.Build.Version, chartYAML)
	}
}

// extract writes the named file of the image's filesystem to a temporary executable.
func extract(t *testing.T, filesystem io.ReadCloser, name string) string {
	t.Helper()
	defer filesystem.Close()
	files := tar.NewReader(filesystem)
	for {
		header, err := files.Next()
		if errors.Is(err, io.EOF) {
			t.Fatalf("the image has no %s", name)
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimPrefix(header.Name, "/") != name {
			continue
		}
		path := filepath.Join(t.TempDir(), name)
		file, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(file, files); err != nil { //nolint:gosec // the test's own build
			t.Fatal(err)
		}
		if err := file.Close(); err != nil {
			t.Fatal(err)
		}
		return path
	}
}
