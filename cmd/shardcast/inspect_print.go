package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printCluster writes the report as a table, or as JSON.
func printCluster(w io.Writer, r clusterReport, asJSON bool) error {
	if asJSON {
		return printJSON(w, r)
	}
	replicas := 0
	for _, m := range r.Masters {
		replicas += len(m.Replicas)
	}
	fmt.Fprintf(w, "cluster %s: %d masters, %d replicas; layout %d partitions, prefix %q, fingerprint %s; sample %.2fs\n\n",
		r.Seed, len(r.Masters), replicas, r.Partitions, r.Prefix, r.Fingerprint, r.SampleSeconds)
	fmt.Fprintf(w, "%s\n\n", r.LayoutNote)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MASTER\tSLOTS\tPARTITIONS\tNAIVE\tSHARD CHANNELS\tSPUBLISH/s\tSSUBSCRIBE/s\tCLIENTS\tCPU%\tOMEM\tMAX OMEM\tREPLICAS")
	var errs []string
	for _, m := range r.Masters {
		if m.Error != "" {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\tunreadable\t-\t-\t-\t-\t-\t-\t%s\n", m.Addr, m.Slots, len(m.Partitions), m.NaivePartitions, replicaSummary(m.Replicas))
			errs = append(errs, m.Error)
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%d\t%.1f\t%s\t%s\t%s\n",
			m.Addr, m.Slots, len(m.Partitions), m.NaivePartitions, m.ShardChannels,
			rateString(m.SPublish.PerSecond), rateString(m.SSubscribe.PerSecond),
			m.Clients, m.CPUPercent, omemString(m.Output), bytesString(m.Output.Max), replicaSummary(m.Replicas))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	printErrors(w, errs)

	fmt.Fprintln(w)
	fmt.Fprintf(w, "partitions per master, busiest/mean: %s with the shipped tags; %s with naive {0}..{%d} tags\n",
		balanceString(r.Balance), balanceString(r.NaiveBalance), r.Partitions-1)
	if r.SPublishBalance.Mean > 0 {
		fmt.Fprintf(w, "SPUBLISH rate per master, busiest/mean: %s\n", balanceString(r.SPublishBalance))
	}
	fmt.Fprintf(w, "masters without partitions: %s\n", listOrNone(r.Idle))
	unowned := make([]string, len(r.Unowned))
	for i, p := range r.Unowned {
		unowned[i] = strconv.Itoa(p)
	}
	fmt.Fprintf(w, "partitions on no master: %s\n", listOrNone(unowned))

	fmt.Fprintf(w, "\npartition:tag per master\n")
	for _, m := range r.Masters {
		items := make([]string, len(m.Partitions))
		for i, p := range m.Partitions {
			items[i] = strconv.Itoa(p.Partition) + ":" + p.Tag
		}
		fmt.Fprintf(w, "%s (slots %s)\n", m.Addr, listOrNone(m.SlotRanges))
		writeWrapped(w, "  ", items, 96)
	}
	return nil
}

// printShards writes the report as a table, or as JSON.
func printShards(w io.Writer, r shardsReport, asJSON bool) error {
	if asJSON {
		return printJSON(w, r)
	}
	fp := r.Fingerprint
	if fp == "" {
		fp = "unknown (an instance did not answer)"
	}
	fmt.Fprintf(w, "sharded: %d instances; fingerprint %s; sample %.2fs\n", len(r.Instances), fp, r.SampleSeconds)
	fmt.Fprintf(w, "%s\n\n", r.LayoutNote)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tINSTANCE\tCHANNELS\tPUBLISH/s\tSUBSCRIBE/s\tCLIENTS\tCPU%\tOMEM\tMAX OMEM")
	var errs []string
	for _, in := range r.Instances {
		if in.Error != "" {
			fmt.Fprintf(tw, "%d\t%s\tunreadable\t-\t-\t-\t-\t-\t-\n", in.Index, in.Addr)
			errs = append(errs, in.Error)
			continue
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%d\t%.1f\t%s\t%s\n", in.Index, in.Addr, in.Channels,
			rateString(in.Publish.PerSecond), rateString(in.Subscribe.PerSecond),
			in.Clients, in.CPUPercent, omemString(in.Output), bytesString(in.Output.Max))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	printErrors(w, errs)
	fmt.Fprintln(w)
	fmt.Fprintf(w, "channels per instance, busiest/mean: %s\n", balanceString(r.ChannelBalance))
	if r.PublishBalance.Mean > 0 {
		fmt.Fprintf(w, "PUBLISH rate per instance, busiest/mean: %s\n", balanceString(r.PublishBalance))
	}
	return nil
}

// printErrors lists why nodes could not be read, below the table.
func printErrors(w io.Writer, errs []string) {
	for _, e := range errs {
		fmt.Fprintln(w, "unreadable:", e)
	}
}

func replicaSummary(rs []replicaLink) string {
	if len(rs) == 0 {
		return "none"
	}
	parts := make([]string, len(rs))
	for i, r := range rs {
		s := r.Addr + " " + r.State
		if r.Link != "" {
			s += "/link " + r.Link
		}
		if r.State == "online" {
			s += " lag " + strconv.FormatInt(r.Lag, 10) + "s"
		}
		parts[i] = s
	}
	return strings.Join(parts, ", ")
}

func balanceString(b balance) string {
	if b.Ratio == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f (%s / %s)", b.Ratio, trimFloat(b.Busiest), trimFloat(b.Mean))
}

// trimFloat formats f with at most two decimals and no trailing zeros.
func trimFloat(f float64) string {
	s := strconv.FormatFloat(f, 'f', 2, 64)
	return strings.TrimRight(strings.TrimRight(s, "0"), ".")
}

func rateString(perSecond float64) string {
	switch {
	case perSecond == 0:
		return "0"
	case perSecond < 10:
		return strconv.FormatFloat(perSecond, 'f', 1, 64)
	default:
		return strconv.FormatFloat(perSecond, 'f', 0, 64)
	}
}

// omemString is the clients' output buffers: their total and how many
// clients hold one.
func omemString(o outputStats) string {
	if o.Backlogged == 0 {
		return "0"
	}
	return fmt.Sprintf("%s/%d", bytesString(o.Total), o.Backlogged)
}

// bytesString formats n bytes with a binary unit.
func bytesString(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + "B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTP"[exp])
}

func listOrNone(items []string) string {
	if len(items) == 0 {
		return "none"
	}
	return strings.Join(items, ", ")
}

// writeWrapped writes items separated by spaces, in lines of at most width
// bytes after indent.
func writeWrapped(w io.Writer, indent string, items []string, width int) {
	if len(items) == 0 {
		fmt.Fprintf(w, "%snone\n", indent)
		return
	}
	line := indent
	for _, it := range items {
		if len(line) > len(indent) && len(line)+1+len(it) > width {
			fmt.Fprintln(w, line)
			line = indent
		}
		if len(line) > len(indent) {
			line += " "
		}
		line += it
	}
	fmt.Fprintln(w, line)
}
