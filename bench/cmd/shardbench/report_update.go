package main

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// updateReport puts this run's sections into the report at path in place
// of the sections of the same heading, or at its end, and leaves the rest
// (the machine, command and targets of the run that wrote it, and the
// other sections) as they are. Each section it writes opens with a line
// naming this run, since the report's header describes another. Targets
// of the sections run are not written (the targets table is the full
// run's), except those of a section with a TargetPrefix: its rows in the
// table are replaced, each marked with this run's date.
func updateReport(path, _ string, sections []section, took time.Duration) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("-update: %w", err)
	}
	doc := string(old)
	for _, s := range sections {
		doc = spliceSection(doc, s.Title, "## "+s.Title+"\n\n"+updateNote(took)+s.Body+"\n")
		if s.TargetPrefix != "" && len(s.Targets) > 0 {
			doc = replaceTargets(doc, s.TargetPrefix, s.Targets, fmt.Sprintf(" (-update run of %s, see its section)", time.Now().UTC().Format(time.DateOnly)))
		}
		if err := writeSectionFiles(path, s); err != nil {
			return err
		}
	}
	return os.WriteFile(path, []byte(doc), 0o644)
}

// updateNote names the run a section written by -update comes from.
func updateNote(took time.Duration) string {
	return fmt.Sprintf("*This section comes from a run of its own, not the one the Machine and Command sections above describe: "+
		"`cd bench && go run ./cmd/shardbench %s` on %s (%s cores, %s, GOMAXPROCS %d, %s; it took %s; load average over the last "+
		"minute %s before it started, %s at its end, its own load included).*\n\n",
		strings.Join(os.Args[1:], " "), time.Now().UTC().Format(time.RFC3339), cmdOut("nproc"), runtime.Version(), clientProcs,
		redisVersion(), took.Round(time.Second), loadBefore, loadAvg())
}

// loadBefore is the machine's load average when the process started.
var loadBefore = loadAvg()

// loadAvg is the load average over the last minute (/proc/loadavg), or "?".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

// redisVersion is redis-server's version number, or "?".
func redisVersion() string {
	for _, f := range strings.Fields(cmdOut("redis-server", "--version")) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return "Redis " + v
		}
	}
	return "Redis ?"
}

// spliceSection replaces, in a report, the section headed "## title" (its
// heading line up to the next "## " heading, or the end) with block, or
// appends block at the end when no section has that heading. A title
// ending in a parenthesis ("Fleet reconnect storm (50, 200 brokers)")
// also replaces a section whose heading differs only inside it (another
// run's sizes).
func spliceSection(doc, title, block string) string {
	start, headLen := headingAt(doc, "## "+title+"\n")
	if stem, _, ok := strings.Cut(title, " ("); start < 0 && ok && strings.HasSuffix(title, ")") {
		for at := 0; at < len(doc); {
			line, _, _ := strings.Cut(doc[at:], "\n")
			if strings.HasPrefix(line, "## "+stem+" (") && strings.HasSuffix(line, ")") && (at == 0 || doc[at-1] == '\n') {
				start, headLen = at, len(line)+1
				break
			}
			i := strings.Index(doc[at:], "\n")
			if i < 0 {
				break
			}
			at += i + 1
		}
	}
	if start < 0 {
		return strings.TrimRight(doc, "\n") + "\n\n" + block
	}
	end := len(doc)
	if i := strings.Index(doc[start+headLen:], "\n## "); i >= 0 {
		end = start + headLen + i + 1
	}
	return doc[:start] + block + doc[end:]
}

// headingAt finds the line head (with its newline) at the start of a line
// of doc: its offset and length, or -1.
func headingAt(doc, head string) (int, int) {
	if strings.HasPrefix(doc, head) {
		return 0, len(head)
	}
	if i := strings.Index(doc, "\n"+head); i >= 0 {
		return i + 1, len(head)
	}
	return -1, 0
}

// replaceTargets replaces, in the report's Targets table, the rows whose
// target starts with prefix by targets (where the first of them stood,
// or at the table's end), note appended to each measured cell. The other
// rows stay as they are, byte for byte; the new ones are padded to the
// header's column widths. A report without the table is returned as it is.
func replaceTargets(doc, prefix string, targets []target, note string) string {
	start, headLen := headingAt(doc, "## Targets\n")
	if start < 0 {
		return doc
	}
	lines := strings.SplitAfter(doc[start+headLen:], "\n")
	first := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "|") })
	if first < 0 {
		return doc
	}
	last := first
	for last < len(lines) && strings.HasPrefix(lines[last], "|") {
		last++
	}
	var widths []int
	for _, c := range strings.Split(strings.Trim(strings.TrimSpace(lines[first]), "|"), "|") {
		widths = append(widths, max(0, len([]rune(c))-2))
	}
	var fresh []string
	for _, t := range targets {
		var b strings.Builder
		b.WriteString("|")
		for i, c := range []string{t.Goal, t.Got + note, t.Met} {
			pad := 0
			if i < len(widths) {
				pad = max(0, widths[i]-len([]rune(c)))
			}
			fmt.Fprintf(&b, " %s%s |", c, strings.Repeat(" ", pad))
		}
		fresh = append(fresh, b.String()+"\n")
	}
	var rows []string
	at := -1
	for _, l := range lines[first+2 : last] { // after the header and its rule
		if strings.HasPrefix(strings.TrimSpace(strings.TrimPrefix(l, "|")), prefix) {
			if at < 0 {
				at = len(rows)
			}
			continue
		}
		rows = append(rows, l)
	}
	if at < 0 {
		at = len(rows)
	}
	rows = slices.Concat(rows[:at:at], fresh, rows[at:])
	before := doc[:start+headLen] + strings.Join(lines[:first+2], "")
	return before + strings.Join(rows, "") + strings.Join(lines[last:], "")
}

// writeSectionFiles writes a section's extra files next to the report.
func writeSectionFiles(path string, s section) error {
	dir := path[:strings.LastIndex(path, "/")+1]
	for name, data := range s.Files {
		if dir != "" {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
		}
		if err := os.WriteFile(dir+name, data, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return nil
}
