// Command taggen writes tags_table.go, the partition tag table of package
// shardcast, after proving every table in it balanced. It is run by
// `go generate` in the module root:
//
//	go run ./internal/taggen/cmd/taggen -o tags_table.go
//
// It prints, for each partition count, the worst difference between the
// partition counts of two masters over every cluster size, and exits
// non-zero without writing anything if a table is not balanced.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/shardcast/shardcast/internal/taggen"
)

func main() {
	out := flag.String("o", "tags_table.go", "output file")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(out string) error {
	start := time.Now()
	src, reports, err := taggen.Generate()
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	if err := os.WriteFile(out, src, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	for _, r := range reports {
		fmt.Printf("N=%4d worst spread %d (first at %d masters)\n", r.Partitions, r.WorstSpread, r.WorstMasters)
	}
	fmt.Printf("wrote %s (%d bytes) in %s\n", out, len(src), elapsed.Round(time.Millisecond))
	return nil
}
