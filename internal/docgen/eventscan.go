package docgen

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Emission is an event the source code records, as far as the source tells without running it.
type Emission struct {
	// Reason is the event's reason, or "" if it is not a constant.
	Reason string
	// Type is "Normal", "Warning", or "" if it is not a constant.
	Type string
	// Position is where the event is recorded (or, for a reason carried in a struct, where the
	// struct is built), as file:line relative to the scanned root.
	Position string
	// Expression is the reason as written, for messages.
	Expression string
}

// recorderArguments returns the positions of the type and reason arguments of client-go's
// EventRecorder methods, and false for any other method.
func recorderArguments(method string) (typeArg, reasonArg int, ok bool) {
	switch method {
	case "Event", "Eventf":
		return 1, 2, true
	case "AnnotatedEventf":
		return 2, 3, true
	}
	return 0, 0, false
}

// ScanEmissions parses the non-test Go files under the given directories of the module at root
// and returns every event they record, in a fixed order. A reason is found when it is a
// constant (a literal, or a constant of the module, concatenated or not) or when it is carried
// in a struct: the recording call reads a field of a parameter of its function whose type is a
// struct type of the module (problem.Reason, with problem *lbspec.Problem). Then every keyed
// literal of that field in a literal of that type, in any scanned package, counts as an
// emission of the type the recording calls use. A field of anything else (a local variable) is
// not followed: its reason counts as not constant.
func ScanEmissions(root string, dirs ...string) ([]Emission, error) {
	modulePath, err := readModulePath(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, err
	}
	s := &scanner{root: root, modulePath: modulePath, fset: token.NewFileSet(), packages: map[string]*scannedPackage{}}
	for _, dir := range dirs {
		if err := s.parseTree(filepath.Join(root, dir)); err != nil {
			return nil, err
		}
	}
	// Carriers may be filled in one package and read in another, so every package's calls are
	// scanned before any literals are.
	carriers := map[carrier][]string{}
	calls := map[string][]Emission{}
	for _, dir := range sortedKeys(s.packages) {
		calls[dir] = s.recordingCalls(s.packages[dir], carriers)
	}
	var emissions []Emission
	for _, dir := range sortedKeys(s.packages) {
		emissions = append(emissions, calls[dir]...)
		emissions = append(emissions, s.carriedReasons(s.packages[dir], carriers)...)
	}
	return emissions, nil
}

type scanner struct {
	root, modulePath string
	fset             *token.FileSet
	// packages by directory relative to root, in slash form.
	packages map[string]*scannedPackage
}

type scannedPackage struct {
	// dir is the package's directory relative to root, in slash form.
	dir       string
	files     []*ast.File
	constants map[string]constant
}

// constant is a named constant's expression with the file that declares it: the names in the
// expression resolve through that file's imports, not those of the file using the constant.
type constant struct {
	expr ast.Expr
	file *ast.File
}

func (s *scanner) parseTree(dir string) error {
	return filepath.WalkDir(dir, func(path string, entry fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case entry.IsDir() && entry.Name() == "testdata":
			return filepath.SkipDir
		case entry.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go"):
			return nil
		}
		file, err := parser.ParseFile(s.fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(s.root, filepath.Dir(path))
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		pkg := s.packages[rel]
		if pkg == nil {
			pkg = &scannedPackage{dir: rel, constants: map[string]constant{}}
			s.packages[rel] = pkg
		}
		pkg.files = append(pkg.files, file)
		collectConstants(file, pkg.constants)
		return nil
	})
}

// collectConstants records the expressions of the file's named constants.
func collectConstants(file *ast.File, into map[string]constant) {
	for _, decl := range file.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.CONST {
			continue
		}
		for _, spec := range gen.Specs {
			value := spec.(*ast.ValueSpec)
			for i, name := range value.Names {
				if i < len(value.Values) {
					into[name.Name] = constant{expr: value.Values[i], file: file}
				}
			}
		}
	}
}

// recordingCalls returns the events a package records with a known reason or none, and adds
// the fields that carry reasons to its calls to carriers, with the calls' event types.
func (s *scanner) recordingCalls(pkg *scannedPackage, carriers map[carrier][]string) []Emission {
	var emissions []Emission
	for _, file := range pkg.files {
		// path holds the nodes enclosing the current one, for the parameters of its functions.
		var path []ast.Node
		ast.Inspect(file, func(node ast.Node) bool {
			if node == nil {
				path = path[:len(path)-1]
				return true
			}
			path = append(path, node)
			call, ok := node.(*ast.CallExpr)
			if !ok {
				return true
			}
			selector, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			typeArg, reasonArg, ok := recorderArguments(selector.Sel.Name)
			if !ok || len(call.Args) <= reasonArg {
				return true
			}
			eventType := eventTypeOf(call.Args[typeArg])
			reasonExpr := call.Args[reasonArg]
			reason, constant := s.constantString(pkg, file, reasonExpr)
			if field, isField := reasonExpr.(*ast.SelectorExpr); !constant && isField {
				if key, ok := s.carrierOf(pkg, file, path, field); ok {
					carriers[key] = append(carriers[key], eventType)
					return true
				}
			}
			emissions = append(emissions, Emission{Reason: reason, Type: eventType, Position: s.position(call), Expression: types.ExprString(reasonExpr)})
			return true
		})
	}
	return emissions
}

// eventTypeOf reads corev1.EventTypeNormal/Warning or their literal values.
func eventTypeOf(expr ast.Expr) string {
	switch e := expr.(type) {
	case *ast.SelectorExpr:
		return strings.TrimPrefix(e.Sel.Name, "EventType")
	case *ast.BasicLit:
		if value, err := strconv.Unquote(e.Value); err == nil {
			return value
		}
	}
	return ""
}

// sameType returns the one type all of eventTypes agree on, or "".
func sameType(eventTypes []string) string {
	for _, t := range eventTypes[1:] {
		if t != eventTypes[0] {
			return ""
		}
	}
	return eventTypes[0]
}

// constantString evaluates a string constant expression: literals, constants of the package or,
// through the file's imports, of other packages of the module, and their concatenations.
func (s *scanner) constantString(pkg *scannedPackage, file *ast.File, expr ast.Expr) (string, bool) {
	switch e := expr.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		value, err := strconv.Unquote(e.Value)
		return value, err == nil
	case *ast.ParenExpr:
		return s.constantString(pkg, file, e.X)
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return "", false
		}
		left, okLeft := s.constantString(pkg, file, e.X)
		right, okRight := s.constantString(pkg, file, e.Y)
		return left + right, okLeft && okRight
	case *ast.Ident:
		if c, ok := pkg.constants[e.Name]; ok {
			return s.constantString(pkg, c.file, c.expr)
		}
	case *ast.SelectorExpr:
		if other := s.importedPackage(file, e.X); other != nil {
			if c, ok := other.constants[e.Sel.Name]; ok {
				return s.constantString(other, c.file, c.expr)
			}
		}
	}
	return "", false
}

// importedPackage returns the scanned package of the module that name refers to in file.
func (s *scanner) importedPackage(file *ast.File, name ast.Expr) *scannedPackage {
	ident, ok := name.(*ast.Ident)
	if !ok || file == nil {
		return nil
	}
	for _, spec := range file.Imports {
		path, err := strconv.Unquote(spec.Path.Value)
		if err != nil || !strings.HasPrefix(path, s.modulePath+"/") {
			continue
		}
		local := path[strings.LastIndex(path, "/")+1:]
		if spec.Name != nil {
			local = spec.Name.Name
		}
		if local == ident.Name {
			return s.packages[strings.TrimPrefix(path, s.modulePath+"/")]
		}
	}
	return nil
}

func (s *scanner) position(node ast.Node) string {
	position := s.fset.Position(node.Pos())
	if rel, err := filepath.Rel(s.root, position.Filename); err == nil {
		position.Filename = filepath.ToSlash(rel)
	}
	return fmt.Sprintf("%s:%d", position.Filename, position.Line)
}

// readModulePath reads the module path from a go.mod file.
func readModulePath(goMod string) (string, error) {
	file, err := os.Open(goMod)
	if err != nil {
		return "", err
	}
	defer file.Close()
	lines := bufio.NewScanner(file)
	for lines.Scan() {
		if path, ok := strings.CutPrefix(strings.TrimSpace(lines.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(path), `"`), nil
		}
	}
	if err := lines.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s declares no module", goMod)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for key := range m {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	return keys
}
