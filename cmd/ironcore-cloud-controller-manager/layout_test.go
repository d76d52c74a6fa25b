package main

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The adapter stays thin and main reads as a list of what it starts: the controllers live in
// internal/, each in its own package. These bounds keep it so ("Where things are" in
// docs/development.md).
const (
	providerLines     = 2000
	providerFileLines = 400
	mainLines         = 150
)

func lines(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(data, []byte("\n"))
}

func TestTheAdapterStaysThin(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "pkg", "provider", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		n := lines(t, file)
		total += n
		if n > providerFileLines {
			t.Errorf("%s has %d lines, more than %d: split it by what it does", file, n, providerFileLines)
		}
	}
	if total > providerLines {
		t.Errorf("pkg/provider has %d non-test lines, more than %d: move what is not an adapter into internal/", total, providerLines)
	}
	if n := lines(t, "main.go"); n > mainLines {
		t.Errorf("main.go has %d lines, more than %d: start controllers from controllers.go", n, mainLines)
	}
}

// TestEveryClientIsBuiltBehindTheWriteGate: the CCM's clients are built in the few places that
// build them on a configuration the write gate wraps (writegates.go, and the IronCore access
// layer), so that a dry run writes nothing and a fenced replica nothing past its lease. A
// client built anywhere else in the CCM's code fails here; build it from the controller
// context's client builder, or add it to a gated place.
func TestEveryClientIsBuiltBehindTheWriteGate(t *testing.T) {
	constructors := regexp.MustCompile(`\b(NewForConfig|NewForConfigAndClient|NewForConfigOrDie|RESTClientFor|UnversionedRESTClientFor|NewRESTClient|HTTPClientFor|NewDynamicClientBuilder|SimpleControllerClientBuilder)\b|\bclient\.New\(|\bcache\.New\(`)
	gated := map[string]int{
		// The clients rebuilt on the credentials that are read again, then gated in writegates.go.
		"cmd/ironcore-cloud-controller-manager/credentials.go": 4,
		"cmd/ironcore-cloud-controller-manager/writegates.go":  3,
		// The IronCore access layer, whose configuration the gate wraps first.
		"internal/ironcore/client.go": 5,
	}
	root := filepath.Join("..", "..")
	found := map[string]int{}
	for _, dir := range []string{"cmd/ironcore-cloud-controller-manager", "pkg", "internal"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, entry fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			rel = filepath.ToSlash(rel)
			// The test stack, the benchmark and the read-only inspection build their own.
			if entry.IsDir() && (rel == "internal/testenv" || rel == "internal/bench" || rel == "internal/inspect") {
				return filepath.SkipDir
			}
			if entry.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if n := len(constructors.FindAll(data, -1)); n > 0 {
				found[rel] = n
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for file, n := range found {
		if gated[file] != n {
			t.Errorf("%s builds %d clients, %d of them known to be behind the write gate: build clients only on the configuration the gate wraps (writegates.go)", file, n, gated[file])
		}
	}
	for file, n := range gated {
		if found[file] == 0 {
			t.Errorf("%s no longer builds its %d clients: update this test", file, n)
		}
	}
}
