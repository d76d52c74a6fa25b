package docgen

import (
	"go/ast"
	"go/types"
)

// carrier is a field of a struct type of the module whose value a recording call uses as the
// event reason.
type carrier struct {
	dir, typeName, field string
}

// carrierOf resolves field, read in the function innermost in path, when it is a field of one
// of the function's parameters (or of an enclosing one's) and the parameter is of a struct
// type of the module, or a pointer to one.
func (s *scanner) carrierOf(pkg *scannedPackage, file *ast.File, path []ast.Node, field *ast.SelectorExpr) (carrier, bool) {
	param, ok := field.X.(*ast.Ident)
	if !ok {
		return carrier{}, false
	}
	for i := len(path) - 1; i >= 0; i-- {
		var fn *ast.FuncType
		switch node := path[i].(type) {
		case *ast.FuncDecl:
			fn = node.Type
		case *ast.FuncLit:
			fn = node.Type
		default:
			continue
		}
		for _, params := range fn.Params.List {
			for _, name := range params.Names {
				if name.Name != param.Name {
					continue
				}
				dir, typeName, ok := s.typeName(pkg, file, params.Type)
				return carrier{dir: dir, typeName: typeName, field: field.Sel.Name}, ok
			}
		}
	}
	return carrier{}, false
}

// typeName resolves a type written in file, T or pkg.T or a pointer to either, to the
// directory of the module package declaring it and its name.
func (s *scanner) typeName(pkg *scannedPackage, file *ast.File, expr ast.Expr) (dir, name string, ok bool) {
	if star, isPointer := expr.(*ast.StarExpr); isPointer {
		expr = star.X
	}
	switch e := expr.(type) {
	case *ast.Ident:
		return pkg.dir, e.Name, true
	case *ast.SelectorExpr:
		if other := s.importedPackage(file, e.X); other != nil {
			return other.dir, e.Sel.Name, true
		}
	}
	return "", "", false
}

// carriedReasons returns an emission for every keyed literal, in the package, of a field that
// carries reasons to a recording call.
func (s *scanner) carriedReasons(pkg *scannedPackage, carriers map[carrier][]string) []Emission {
	var emissions []Emission
	for _, file := range pkg.files {
		// elided holds the types of the literals written without one, inside a slice or map.
		elided := map[*ast.CompositeLit]ast.Expr{}
		ast.Inspect(file, func(node ast.Node) bool {
			lit, ok := node.(*ast.CompositeLit)
			if !ok {
				return true
			}
			litType := lit.Type
			if litType == nil {
				litType = elided[lit]
			}
			noteElided(lit, litType, elided)
			dir, typeName, ok := s.typeName(pkg, file, litType)
			if !ok {
				return true
			}
			for _, element := range lit.Elts {
				pair, ok := element.(*ast.KeyValueExpr)
				if !ok {
					continue
				}
				key, ok := pair.Key.(*ast.Ident)
				if !ok {
					continue
				}
				eventTypes := carriers[carrier{dir: dir, typeName: typeName, field: key.Name}]
				if eventTypes == nil {
					continue
				}
				reason, _ := s.constantString(pkg, file, pair.Value)
				emissions = append(emissions, Emission{Reason: reason, Type: sameType(eventTypes), Position: s.position(pair), Expression: types.ExprString(pair.Value)})
			}
			return true
		})
	}
	return emissions
}

// noteElided records the element type of a slice, array or map literal for its elements
// written without a type ([]T{{...}}), which ast.Inspect visits next.
func noteElided(lit *ast.CompositeLit, litType ast.Expr, elided map[*ast.CompositeLit]ast.Expr) {
	var elementType ast.Expr
	switch t := litType.(type) {
	case *ast.ArrayType:
		elementType = t.Elt
	case *ast.MapType:
		elementType = t.Value
	default:
		return
	}
	for _, element := range lit.Elts {
		if pair, ok := element.(*ast.KeyValueExpr); ok {
			element = pair.Value
		}
		if inner, ok := element.(*ast.CompositeLit); ok && inner.Type == nil {
			elided[inner] = elementType
		}
	}
}
