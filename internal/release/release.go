package release

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/version"
)

// Binary names of the release.
const (
	CCMBinary     = "ironcore-cloud-controller-manager"
	InspectBinary = "ironcore-ccm-inspect"
)

// Result is what a release wrote.
type Result struct {
	Build  version.Info
	Tag    string
	Digest string
	// Layout, Tarball and Chart are the paths of the OCI layout, the tarball and the chart.
	Layout, Tarball, Chart string
}

// Make makes a release of the binaries in dir: the image, tagged with the CCM binary's own
// version, in out/image (OCI layout) and out/image.tar, and the chart in out/chart with that
// appVersion. arch is the binaries' GOARCH.
func Make(dir, out, chart, arch string) (Result, error) {
	ccm := filepath.Join(dir, CCMBinary)
	// The version is the binary's own: what it prints is what the image and the chart say.
	raw, err := exec.Command(ccm, "--version=raw").Output()
	if err != nil {
		return Result{}, fmt.Errorf("%s --version=raw: %w", ccm, err)
	}
	var build version.Info
	if err := json.Unmarshal(raw, &build); err != nil {
		return Result{}, fmt.Errorf("%s --version=raw: %w", ccm, err)
	}
	created, err := time.Parse(time.RFC3339, build.CommitTime)
	if err != nil {
		return Result{}, fmt.Errorf("%s does not know its commit (version %s): build it from a git checkout with -buildvcs=auto, as make release does", ccm, build.Version)
	}
	image := Image{
		Binaries:   []string{ccm, filepath.Join(dir, InspectBinary)},
		Entrypoint: CCMBinary,
		Version:    build.Version, Commit: build.Commit, Created: created, Arch: arch,
	}
	tag, err := image.Tag()
	if err != nil {
		return Result{}, err
	}
	built, err := image.Build()
	if err != nil {
		return Result{}, err
	}
	result := Result{
		Build: build, Tag: tag.String(),
		Layout: filepath.Join(out, "image"), Tarball: filepath.Join(out, "image.tar"), Chart: filepath.Join(out, "chart"),
	}
	if err := Write(built, tag, result.Layout, result.Tarball); err != nil {
		return Result{}, err
	}
	if err := Chart(chart, result.Chart, build.Version); err != nil {
		return Result{}, fmt.Errorf("chart: %w", err)
	}
	digest, err := built.Digest()
	if err != nil {
		return Result{}, err
	}
	result.Digest = digest.String()
	return result, nil
}
