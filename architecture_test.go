package shardcast

import (
	"encoding/json"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// layers ranks the module's packages as docs/ARCHITECTURE.md draws them:
// a package may import packages of its own layer or below, never above.
// Paths are relative to the module; a prefix ending in "/" covers a tree.
var layers = []struct {
	name     string
	packages []string
}{
	{"bottom", []string{"envelope", "internal/resp", "internal/subconn", "internal/pubconn", "internal/sentinel",
		"internal/redisaddr", "internal/crc16", "internal/jump", "internal/badconfig", "internal/notsent",
		"internal/compact", "internal/observe", "internal/pool", "internal/hist"}},
	{"contract", []string{""}},
	{"kit", []string{"internal/engine", "internal/relayout", "internal/agreement", "internal/layoutkey",
		"internal/events", "internal/hot"}},
	{"engines", []string{"sharded", "cluster"}},
	{"add-ons", []string{"cmd/", "examples/"}},
}

// beside are packages outside the layers: generators and test support.
var beside = []string{"internal/layoutgen", "internal/taggen", "redistest", "brokertest", "interop"}

const modulePath = "github.com/shardcast/shardcast"

// layerOf returns the rank of the module package rel ("" is the root),
// or -1 for a package beside the layers.
func layerOf(t *testing.T, rel string) int {
	for _, b := range beside {
		if rel == b || strings.HasPrefix(rel, b+"/") {
			return -1
		}
	}
	for rank, l := range layers {
		for _, p := range l.packages {
			if rel == p || (strings.HasSuffix(p, "/") && strings.HasPrefix(rel, p)) {
				return rank
			}
		}
	}
	t.Errorf("package %q is in no layer: add it to docs/ARCHITECTURE.md and to layers here", rel)
	return -1
}

// TestImportsPointDown: no package of the module imports one of a layer
// above its own, add-ons use public packages only, and the nested modules
// import no internal package of the library.
func TestImportsPointDown(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports", "./...").Output()
	require.NoError(t, err)
	dec := json.NewDecoder(strings.NewReader(string(out)))
	checked := 0
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
		}
		require.NoError(t, dec.Decode(&p))
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, modulePath), "/")
		from := layerOf(t, rel)
		if from < 0 {
			continue
		}
		checked++
		for _, imp := range p.Imports {
			if imp != modulePath && !strings.HasPrefix(imp, modulePath+"/") {
				continue
			}
			to := strings.TrimPrefix(strings.TrimPrefix(imp, modulePath), "/")
			if layers[from].name == "add-ons" {
				assert.False(t, strings.HasPrefix(to, "internal/"), "%s (an add-on) imports %s", p.ImportPath, imp)
			}
			if r := layerOf(t, to); r > from {
				t.Errorf("%s (%s) imports %s (%s), a layer above", p.ImportPath, layers[from].name, imp, layers[r].name)
			}
		}
	}
	assert.Greater(t, checked, 25, "the module's packages were listed")

	nested := 0
	for _, dir := range []string{"contrib", "bench", "examples/chat"} {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
				return err
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			nested++
			for _, is := range f.Imports {
				imp, _ := strconv.Unquote(is.Path.Value)
				assert.False(t, strings.HasPrefix(imp, modulePath+"/internal/"), "%s imports %s", path, imp)
			}
			return nil
		})
		require.NoError(t, err)
	}
	assert.Greater(t, nested, 50, "the nested modules' files were read")
}
