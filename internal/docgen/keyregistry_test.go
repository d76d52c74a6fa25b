package docgen

import (
	"go/ast"
	goconstant "go/constant"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
)

// declaredKeys returns the key constants of package keys by name, evaluated by the type checker.
func declaredKeys(t *testing.T) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "../keys/keys.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := (&types.Config{}).Check("keys", fset, []*ast.File{file}, nil)
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]string{}
	for _, name := range pkg.Scope().Names() {
		if c, ok := pkg.Scope().Lookup(name).(*types.Const); ok && c.Exported() && name != "Prefix" {
			declared[name] = goconstant.StringVal(c.Val())
		}
	}
	if len(declared) == 0 {
		t.Fatal("found no key constants in keys.go")
	}
	return declared
}

// TestAllDocumentsEveryKeyConstant fails when a key constant is added without documentation.
func TestAllDocumentsEveryKeyConstant(t *testing.T) {
	documented := map[string]bool{}
	for _, key := range AllKeys() {
		documented[key.Name] = true
	}
	for name, value := range declaredKeys(t) {
		if !documented[value] {
			t.Errorf("%s (%q) is not documented in AllKeys", name, value)
		}
	}
}

func TestAllIsWellFormed(t *testing.T) {
	seen := map[string]bool{}
	for _, key := range AllKeys() {
		if seen[key.Name] {
			t.Errorf("%s is documented twice", key.Name)
		}
		seen[key.Name] = true
		if msgs := validation.IsQualifiedName(key.Name); len(msgs) > 0 {
			t.Errorf("%s is not a valid key: %s", key.Name, strings.Join(msgs, "; "))
		}
		if key.Kind != Label && key.Kind != Annotation {
			t.Errorf("%s has kind %q", key.Name, key.Kind)
		}
		if key.Origin == OriginOurs && !strings.HasPrefix(key.Name, keys.Prefix) {
			t.Errorf("%s is ours but does not start with %s", key.Name, keys.Prefix)
		}
		if len(key.On) == 0 || key.Origin == "" || key.WrittenBy == "" || key.ReadBy == "" || key.Meaning == "" {
			t.Errorf("%s is not fully documented: %+v", key.Name, key)
		}
	}
}

// TestEveryKeyConstantIsUsed fails when a key is no longer read or written anywhere, so that the
// docs cannot describe dead keys.
func TestEveryKeyConstantIsUsed(t *testing.T) {
	used := map[string]bool{}
	for _, dir := range []string{"../../cmd", "../../internal", "../../pkg"} {
		err := filepath.WalkDir(dir, func(path string, entry fs.DirEntry, err error) error {
			switch {
			case err != nil:
				return err
			case entry.IsDir() && (entry.Name() == "testdata" || entry.Name() == "docgen"):
				// docgen documents every key; documenting one is no use of it.
				return filepath.SkipDir
			case entry.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go"):
				return nil
			}
			file, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			ast.Inspect(file, func(node ast.Node) bool {
				if selector, ok := node.(*ast.SelectorExpr); ok {
					if pkg, ok := selector.X.(*ast.Ident); ok && pkg.Name == "keys" {
						used[selector.Sel.Name] = true
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for name := range declaredKeys(t) {
		if !used[name] {
			t.Errorf("keys.%s is used nowhere outside tests; remove it from keys.go and AllKeys", name)
		}
	}
}
