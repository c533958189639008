package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
)

func runVersion(_ context.Context, args []string, io stdio) error {
	fs := newFlagSet("version", "")
	if err := parseFlags(fs, args, io.out); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf(fs, "takes no arguments, got %q", fs.Args())
	}
	info, ok := debug.ReadBuildInfo()
	fmt.Fprintln(io.out, versionLine(info, ok))
	return nil
}

// versionLine says which build this is: the module version it was built
// at ("go install …@v0.0.0-20261202004229-3a0f839abcde" records it), the
// commit for a build in a clone (when Go stamped it: -buildvcs), and the
// Go version and platform.
func versionLine(info *debug.BuildInfo, ok bool) string {
	version := "(unknown)"
	var revision, modified string
	goVersion := runtime.Version()
	if ok && info != nil {
		if info.Main.Version != "" {
			version = info.Main.Version
		}
		if info.GoVersion != "" {
			goVersion = info.GoVersion
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
	}
	line := "shardcast " + version
	if revision != "" {
		line += " commit " + revision
		if modified == "true" {
			line += " (modified)"
		}
	}
	return fmt.Sprintf("%s %s %s/%s", line, goVersion, runtime.GOOS, runtime.GOARCH)
}
