// Package release builds this CCM's container image from its static binaries, with no
// container runtime and no registry: an OCI image of one layer on an empty base, written as an
// OCI image layout and as a tarball that `docker load` and `podman load` read. Its tag is the
// binary's own version (internal/version), which the chart's appVersion takes too. The same
// binaries give the same image digest: every time in it is the commit's time, and the layer
// holds its files in a fixed order with fixed owners and modes.
package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Repository is where the image is published.
const Repository = "ghcr.io/ironcore-dev/ironcore-cloud-controller-manager"

// User is the image's user: distroless' nonroot, as the chart's securityContext expects. The
// binaries need no file of the image's but themselves, so the image has no /etc/passwd.
const User = "65532:65532"

// Image describes the image to build.
type Image struct {
	// Binaries are the paths of the static binaries; each is put at / under its base name.
	Binaries []string
	// Entrypoint is the base name of the binary the image runs.
	Entrypoint string
	// Version tags the image; Commit and Created label it, and Created is every time in it.
	Version, Commit string
	Created         time.Time
	// Arch is the binaries' GOARCH.
	Arch string
}

// Build builds the image.
func (i Image) Build() (v1.Image, error) {
	layerTar, err := i.layerTar()
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestSpeed), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("layer of %v: %w", i.Binaries, err)
	}
	created := v1.Time{Time: i.Created.UTC()}
	image := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	image, err = mutate.Append(image, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: created, CreatedBy: "ironcore-ccm-release", Comment: "the static binaries"},
	})
	if err != nil {
		return nil, err
	}
	config, err := image.ConfigFile()
	if err != nil {
		return nil, err
	}
	config = config.DeepCopy()
	config.OS, config.Architecture, config.Created = "linux", i.Arch, created
	config.Config = v1.Config{
		Entrypoint: []string{"/" + i.Entrypoint},
		User:       User,
		Labels: map[string]string{
			"org.opencontainers.image.title":    i.Entrypoint,
			"org.opencontainers.image.version":  i.Version,
			"org.opencontainers.image.revision": i.Commit,
			"org.opencontainers.image.created":  created.Format(time.RFC3339),
			"org.opencontainers.image.source":   "https://github.com/ironcore-dev/ironcore-cloud-controller-manager",
		},
	}
	return mutate.ConfigFile(image, config)
}

// layerTar is the layer's uncompressed tar: the binaries at /, owned by root, executable by
// all, dated Created.
func (i Image) layerTar() ([]byte, error) {
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	for _, path := range i.Binaries {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read binary: %w", err)
		}
		header := &tar.Header{
			Typeflag: tar.TypeReg, Name: filepath.Base(path), Size: int64(len(data)), Mode: 0o755,
			ModTime: i.Created.UTC(), Format: tar.FormatPAX,
		}
		if err := w.WriteHeader(header); err != nil {
			return nil, err
		}
		if _, err := w.Write(data); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Tag is the image's reference: the repository and the version.
func (i Image) Tag() (name.Tag, error) {
	tag, err := name.NewTag(Repository + ":" + i.Version)
	if err != nil {
		return name.Tag{}, fmt.Errorf("version %q is not an image tag: %w", i.Version, err)
	}
	return tag, nil
}

// Write writes the image as an OCI image layout in dir (replacing what is there) and as a
// tarball at tarPath, both tagged with the version.
func Write(image v1.Image, tag name.Tag, dir, tarPath string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	path, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	if err := path.AppendImage(image, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag.TagStr(),
	})); err != nil {
		return fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	if err := tarball.WriteToFile(tarPath, tag, image); err != nil {
		return fmt.Errorf("image tarball %s: %w", tarPath, err)
	}
	return nil
}
