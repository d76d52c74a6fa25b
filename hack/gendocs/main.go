// Command gendocs writes the reference documentation generated from the code (see
// internal/docgen). It runs from `go generate ./...`.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/docgen"
)

func main() {
	root := flag.String("root", ".", "the repository root")
	flag.Parse()
	if err := docgen.Write(*root); err != nil {
		fmt.Fprintf(os.Stderr, "gendocs: %v\n", err)
		os.Exit(1)
	}
}
