package docgen

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// File is one generated file, its path relative to the repository root in slash form.
type File struct {
	Path    string
	Content []byte
}

// Files renders every generated file, in a fixed order. Rendering reads no file and no clock,
// so the same code always gives the same bytes.
func Files() ([]File, error) {
	flags, err := flagsReference()
	if err != nil {
		return nil, err
	}
	return []File{
		{Path: "docs/reference/flags.md", Content: flags},
		{Path: "docs/reference/cloud-config.md", Content: cloudConfigReference()},
		{Path: "docs/reference/annotations.md", Content: annotationsReference()},
		{Path: "docs/events.md", Content: eventsCatalog()},
	}, nil
}

// Write writes every generated file under root, the repository root.
func Write(root string) error {
	files, err := Files()
	if err != nil {
		return err
	}
	for _, file := range files {
		path := filepath.Join(root, filepath.FromSlash(file.Path))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, file.Content, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Stale returns the paths of the generated files under root that are missing or differ from
// what the code generates now.
func Stale(root string) ([]string, error) {
	files, err := Files()
	if err != nil {
		return nil, err
	}
	var stale []string
	for _, file := range files {
		committed, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file.Path)))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			stale = append(stale, file.Path)
		case err != nil:
			return nil, fmt.Errorf("read %s: %w", file.Path, err)
		case !bytes.Equal(committed, file.Content):
			stale = append(stale, file.Path)
		}
	}
	return stale, nil
}
