package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

// updateReport puts this run's sections into the report at path in place
// of the sections of the same heading, or at its end, and leaves the rest
// (the machine, command and targets of the run that wrote it, and the
// other sections) as they are. Each section it writes opens with a line
// naming this run, since the report's header describes another. Targets
// of the sections run are not written: the targets table is the full
// run's.
func updateReport(path, _ string, sections []section, took time.Duration) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("-update: %w", err)
	}
	doc := string(old)
	for _, s := range sections {
		doc = spliceSection(doc, s.Title, "## "+s.Title+"\n\n"+updateNote(took)+s.Body+"\n")
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
// appends block at the end when no section has that heading.
func spliceSection(doc, title, block string) string {
	head := "## " + title + "\n"
	start := -1
	if strings.HasPrefix(doc, head) {
		start = 0
	} else if i := strings.Index(doc, "\n"+head); i >= 0 {
		start = i + 1
	}
	if start < 0 {
		return strings.TrimRight(doc, "\n") + "\n\n" + block
	}
	end := len(doc)
	if i := strings.Index(doc[start+len(head):], "\n## "); i >= 0 {
		end = start + len(head) + i + 1
	}
	return doc[:start] + block + doc[end:]
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
