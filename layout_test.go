package sqlflight

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// modulePath is the root module's import path.
const modulePath = "github.com/sqlflight/sqlflight"

// testHarnesses are the internal packages that are not mechanisms but
// harnesses driving the whole driver from a test, and so import the root.
var testHarnesses = map[string]string{
	"internal/pgxsuite": "runs pgx's own stdlib suite through sqlflight (.ci/pgx-stdlib) and its pgxpool tests through the pgx face (.ci/pgxpool-suite)",
}

// TestInternalPackagesPointDown: no package under internal/ imports the
// root package or a package of another module of the repository (redistier,
// prom, …): the mechanisms sit below the database/sql face, never above it.
// Only the test harnesses (testHarnesses) drive the root.
func TestInternalPackagesPointDown(t *testing.T) {
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir("internal", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		files++
		if _, ok := testHarnesses[filepath.ToSlash(filepath.Dir(path))]; ok {
			return nil
		}
		for _, im := range f.Imports {
			p, err := strconv.Unquote(im.Path.Value)
			if err != nil {
				return err
			}
			if p == modulePath || strings.HasPrefix(p, modulePath+"/") && !strings.HasPrefix(p, modulePath+"/internal/") {
				t.Errorf("%s imports %s: internal packages may import only internal packages of the module", path, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatal("no Go file under internal/: the test looks at nothing")
	}
}
