package main

import (
	"bytes"
	"os"
	"path/filepath"
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
