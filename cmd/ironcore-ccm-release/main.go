// Command ironcore-ccm-release makes a release of the binaries `make release` built: the
// container image, tagged with the binaries' own version, as an OCI image layout and a tarball
// (`docker load -i`), and the chart with that version as its appVersion. It needs no container
// runtime or registry; the same binaries give the same image digest.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/release"
)

func main() {
	binaries := flag.String("binaries", "bin/release", "the directory holding the static binaries "+release.CCMBinary+" and "+release.InspectBinary)
	out := flag.String("out", "bin/release", "where to write image/ (the OCI layout), image.tar and chart/")
	chart := flag.String("chart", "charts/"+release.CCMBinary, "the chart to stamp with the version")
	arch := flag.String("arch", "amd64", "the binaries' GOARCH")
	flag.Parse()
	result, err := release.Make(*binaries, *out, *chart, *arch)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ironcore-ccm-release: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("version %s (commit %s)\nimage   %s@%s\n        %s (OCI layout), %s (docker load -i)\nchart   %s (appVersion %s)\n",
		result.Build.Version, result.Build.Commit, result.Tag, result.Digest, result.Layout, result.Tarball, result.Chart, result.Build.Version)
}
