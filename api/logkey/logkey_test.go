package logkey_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/constant"
	"go/importer"
	"go/parser"
	"go/printer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const logkeyPath = "github.com/fleet-role/fleet-role/api/logkey"

// checked are the packages whose log records are events: the agent, the
// controller, the platforms and the binary.
var checked = []string{"./daemon/...", "./controller/...", "./platform/...", "./cmd/..."}

// The log calls of the agent, the controller, the platforms and the binary
// have a constant message and every key a constant of this package; none
// of them logs through the standard library's log package.
func TestEveryLogCallHasAConstantMessageAndLogkeyKeys(t *testing.T) {
	pkgs := typeCheck(t, append([]string{"./api/logkey"}, checked...)...)
	calls := map[string]int{}
	for _, p := range pkgs {
		if p.types.Path() == logkeyPath {
			continue
		}
		for _, f := range p.files {
			for _, im := range f.Imports {
				if im.Path.Value == `"log"` {
					t.Errorf("%s: imports the standard library's log: log through log/slog", p.pos(im))
				}
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.CallExpr:
					if checkCall(t, p, n) {
						calls[p.types.Path()]++
					}
				case *ast.CompositeLit:
					checkAttrLiteral(t, p, n)
				}
				return true
			})
		}
	}
	// The check sees the calls it is meant for.
	for _, dir := range []string{"daemon", "controller", "cmd/fleet-role"} {
		assert.Positive(t, calls["github.com/fleet-role/fleet-role/"+dir], "no log call found in %s", dir)
	}
}

// The keys are snake_case, each spelled once, and none is a variant of
// another concept's name.
func TestTheKeysAreOneVocabulary(t *testing.T) {
	pkgs := typeCheck(t, "./api/logkey")
	require.Len(t, pkgs, 1)
	scope := pkgs[0].types.Scope()
	snake := regexp.MustCompile(`^[a-z]+(_[a-z]+)*$`)
	seen := map[string]string{}
	for _, name := range scope.Names() {
		c, ok := scope.Lookup(name).(*types.Const)
		if !ok {
			continue
		}
		v := constant.StringVal(c.Val())
		assert.Regexp(t, snake, v, "logkey.%s", name)
		if other, dup := seen[v]; dup {
			t.Errorf("logkey.%s and logkey.%s are both %q", other, name, v)
		}
		seen[v] = name
	}
	for _, shared := range []string{"node", "swap", "step", "action", "err", "reason", "took", "component"} {
		assert.Contains(t, seen, shared)
	}
	for _, variant := range []string{"error", "do", "msg", "swap_id", "node_name", "nodename"} {
		assert.NotContains(t, seen, variant, "a variant of a name the vocabulary has")
	}
}

type pkg struct {
	root  string
	fset  *token.FileSet
	files []*ast.File
	types *types.Package
	info  *types.Info
}

// pos is where n is, from the module's root.
func (p *pkg) pos(n ast.Node) string {
	at := p.fset.Position(n.Pos())
	if rel, err := filepath.Rel(p.root, at.Filename); err == nil {
		at.Filename = rel
	}
	return at.String()
}

// typeCheck type-checks the packages the patterns match from their source,
// their imports from the export data go list gives, without their tests.
func typeCheck(t *testing.T, patterns ...string) []*pkg {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-export", "-deps", "-json=ImportPath,Dir,GoFiles,Export,DepOnly"}, patterns...)...)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	cmd.Dir = root
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go list: %s", stderr.String())
	type listed struct {
		ImportPath, Dir, Export string
		GoFiles                 []string
		DepOnly                 bool
	}
	exports := map[string]string{}
	var roots []listed
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var l listed
		if err := dec.Decode(&l); errors.Is(err, io.EOF) {
			break
		} else {
			require.NoError(t, err)
		}
		exports[l.ImportPath] = l.Export
		if !l.DepOnly {
			roots = append(roots, l)
		}
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		if exports[path] == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(exports[path])
	})
	var pkgs []*pkg
	for _, l := range roots {
		p := &pkg{root: root, fset: fset, info: &types.Info{
			Types:      map[ast.Expr]types.TypeAndValue{},
			Uses:       map[*ast.Ident]types.Object{},
			Selections: map[*ast.SelectorExpr]*types.Selection{},
		}}
		for _, name := range l.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(l.Dir, name), nil, parser.SkipObjectResolution)
			require.NoError(t, err)
			p.files = append(p.files, f)
		}
		p.types, err = (&types.Config{Importer: imp}).Check(l.ImportPath, fset, p.files, p.info)
		require.NoError(t, err)
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// callee is the function or method a call calls, nil for a conversion or
// a call of a function value.
func callee(info *types.Info, call *ast.CallExpr) *types.Func {
	var id *ast.Ident
	switch fn := ast.Unparen(call.Fun).(type) {
	case *ast.Ident:
		id = fn
	case *ast.SelectorExpr:
		if sel, ok := info.Selections[fn]; ok {
			f, _ := sel.Obj().(*types.Func)
			return f
		}
		id = fn.Sel
	default:
		return nil
	}
	f, _ := info.Uses[id].(*types.Func)
	return f
}

// checkCall checks a call of log/slog by its parameters' names: msg is a
// constant; key, and WithGroup's name, a logkey constant; args are
// key-value pairs and Attrs. It says whether the call logs a record.
func checkCall(t *testing.T, p *pkg, call *ast.CallExpr) bool {
	fn := callee(p.info, call)
	if fn == nil || fn.Pkg() == nil || fn.Pkg().Path() != "log/slog" {
		return false
	}
	at := p.pos(call)
	sig := fn.Type().(*types.Signature)
	logs := false
	for i := 0; i < sig.Params().Len() && i < len(call.Args); i++ {
		arg := call.Args[i]
		switch param := sig.Params().At(i); param.Name() {
		case "msg":
			logs = true
			if tv := p.info.Types[arg]; tv.Value == nil || tv.Value.Kind() != constant.String {
				t.Errorf("%s: the message of %s is not a constant: name the kind of event, and make the values fields", at, fn.Name())
			}
		case "key", "name":
			if !isLogkey(p.info, arg) {
				t.Errorf("%s: the key %s of %s is not a logkey constant", at, text(p, arg), fn.Name())
			}
		case "args":
			if call.Ellipsis.IsValid() {
				t.Errorf("%s: %s's arguments are spread from a slice: its keys cannot be checked", at, fn.Name())
				break
			}
			checkArgs(t, p, fn.Name(), call.Args[i:])
		}
	}
	return logs
}

// checkArgs checks the key-value pairs and Attrs of a log call as slog
// reads them: an Attr stands alone (its constructor is a call checked on
// its own), anything else is a key followed by its value.
func checkArgs(t *testing.T, p *pkg, fn string, args []ast.Expr) {
	for i := 0; i < len(args); i++ {
		if isAttr(p.info.TypeOf(args[i])) {
			continue
		}
		if !isLogkey(p.info, args[i]) {
			t.Errorf("%s: the key %s of %s is not a logkey constant", p.pos(args[i]), text(p, args[i]), fn)
		}
		i++ // the value
	}
}

// checkAttrLiteral checks the Key of an slog.Attr written as a literal.
func checkAttrLiteral(t *testing.T, p *pkg, lit *ast.CompositeLit) {
	if !isAttr(p.info.TypeOf(lit)) {
		return
	}
	for i, e := range lit.Elts {
		key := e
		if kv, ok := e.(*ast.KeyValueExpr); ok {
			if id, _ := kv.Key.(*ast.Ident); id == nil || id.Name != "Key" {
				continue
			}
			key = kv.Value
		} else if i != 0 {
			continue
		}
		if !isLogkey(p.info, key) {
			t.Errorf("%s: the key %s of an slog.Attr is not a logkey constant", p.pos(key), text(p, key))
		}
	}
}

func isAttr(t types.Type) bool {
	named, ok := types.Unalias(t).(*types.Named)
	if !ok {
		return false
	}
	obj := named.Obj()
	return obj.Pkg() != nil && obj.Pkg().Path() == "log/slog" && obj.Name() == "Attr"
}

// isLogkey says whether e names a constant of logkey.
func isLogkey(info *types.Info, e ast.Expr) bool {
	var id *ast.Ident
	switch e := ast.Unparen(e).(type) {
	case *ast.Ident:
		id = e
	case *ast.SelectorExpr:
		id = e.Sel
	default:
		return false
	}
	c, ok := info.Uses[id].(*types.Const)
	return ok && c.Pkg() != nil && c.Pkg().Path() == logkeyPath
}

// text is an expression as written.
func text(p *pkg, e ast.Expr) string {
	var b strings.Builder
	_ = printer.Fprint(&b, p.fset, e)
	return b.String()
}
