package main

import (
	"context"
	"fmt"
	"text/tabwriter"
)

func runTags(_ context.Context, args []string, io stdio) error {
	var (
		partitions int
		asJSON     bool
	)
	fs := newFlagSet("tags", "[-partitions N] [-json]")
	fs.IntVar(&partitions, "partitions", 128, "partition count (a power of two, 16 to 4096)")
	fs.BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	if err := parseFlags(fs, args, io.out); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf(fs, "takes no arguments, got %q", fs.Args())
	}
	table, err := tagTable(partitions)
	if err != nil {
		return usageErr(fs, err)
	}
	if asJSON {
		return printJSON(io.out, table)
	}
	tw := tabwriter.NewWriter(io.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tTAG\tSLOT")
	for _, p := range table {
		fmt.Fprintf(tw, "%d\t%s\t%d\n", p.Partition, p.Tag, p.Slot)
	}
	return tw.Flush()
}

// tagTable returns every partition of the layout with n partitions, with
// its shipped tag and slot.
func tagTable(n int) ([]partitionInfo, error) {
	l, err := (&layoutFlags{partitions: n}).layout()
	if err != nil {
		return nil, err
	}
	out := make([]partitionInfo, n)
	for p := range out {
		out[p] = partitionInfo{Partition: p, Tag: l.Tag(p), Slot: l.Slot(p)}
	}
	return out, nil
}
