package release

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
)

// appVersionLine is the chart's appVersion, which the image tag defaults to.
var appVersionLine = regexp.MustCompile(`(?m)^appVersion:.*$`)

// Chart copies the chart in src to dst (replacing what is there) with its appVersion set to
// the version, so that the chart deploys the image of the same build.
func Chart(src, dst, version string) error {
	if err := os.RemoveAll(dst); err != nil {
		return err
	}
	return filepath.WalkDir(src, func(path string, entry fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if entry.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if rel == "Chart.yaml" {
			if !appVersionLine.Match(data) {
				return fmt.Errorf("%s has no appVersion", path)
			}
			data = appVersionLine.ReplaceAll(data, []byte(fmt.Sprintf("appVersion: %q", version)))
		}
		return os.WriteFile(target, data, 0o644)
	})
}
