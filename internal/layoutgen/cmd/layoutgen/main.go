// Command layoutgen writes docs/tags/N.txt and
// testdata/layout_vectors.json (see package layoutgen) under the module
// root given by -root. It is run by `go generate` in internal/layoutgen:
//
//	go run ./cmd/layoutgen -root ../..
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/shardcast/shardcast/internal/layoutgen"
)

func main() {
	root := flag.String("root", ".", "module root to write under")
	flag.Parse()
	if err := run(*root); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(root string) error {
	files, err := layoutgen.Files()
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return fmt.Errorf("layoutgen: %s is not the module root: %w", root, err)
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, files[p], 0o644); err != nil {
			return fmt.Errorf("layoutgen: %w", err)
		}
		fmt.Printf("wrote %s (%d bytes)\n", p, len(files[p]))
	}
	return nil
}
