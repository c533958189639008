package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// The process's exit status: 0 for success and for help that was asked
// for (-h, help), 1 when a command failed, 2 for a command line that is
// wrong (the usage is then printed on stderr). These are the flag
// package's own conventions.
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
)

// usageError is a command line that is wrong: an unknown command, a flag
// that does not parse, a missing argument, flags that exclude each other.
// cli prints it with the usage and exits 2.
type usageError struct {
	err error
	// usage prints the usage of the command that refused the line.
	usage func(io.Writer)
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// commandError is an error of the named subcommand: its message is
// printed under the prefix "shardcast NAME:".
type commandError struct {
	name string
	err  error
}

func (e *commandError) Error() string { return e.err.Error() }
func (e *commandError) Unwrap() error { return e.err }

// message is err's text under one prefix, "shardcast:" or "shardcast
// NAME:". The library's errors carry a "shardcast: " of their own, which
// would print twice; it is dropped wherever it starts a part of the
// message (after ": " or at the start of a line).
func message(err error) string {
	prefix := "shardcast"
	var c *commandError
	if errors.As(err, &c) {
		prefix += " " + c.name
	}
	text := err.Error()
	for {
		t := strings.TrimPrefix(text, "shardcast: ")
		t = strings.ReplaceAll(t, ": shardcast: ", ": ")
		t = strings.ReplaceAll(t, "\nshardcast: ", "\n")
		if t == text {
			break
		}
		text = t
	}
	return prefix + ": " + text
}

// newFlagSet returns a subcommand's flag set. It prints nothing itself:
// parseFlags and usageErr say where its usage goes.
func newFlagSet(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		w := fs.Output()
		line := "usage: shardcast " + name
		if synopsis != "" {
			line += " " + synopsis
		}
		fmt.Fprintln(w, line)
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			fmt.Fprintf(w, "\nflags:\n")
			fs.PrintDefaults()
		}
	}
	return fs
}

// printUsage writes fs's usage to w.
func printUsage(fs *flag.FlagSet, w io.Writer) {
	fs.SetOutput(w)
	fs.Usage()
	fs.SetOutput(io.Discard)
}

// parseFlags parses args into fs. For -h or -help it prints the usage on
// out and returns flag.ErrHelp, which run turns into success; a flag that
// does not parse is a usage error.
func parseFlags(fs *flag.FlagSet, args []string, out io.Writer) error {
	err := fs.Parse(args)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		printUsage(fs, out)
		return flag.ErrHelp
	default:
		return usageErr(fs, err)
	}
}

// usageErr marks err as a usage error of fs's subcommand.
func usageErr(fs *flag.FlagSet, err error) error {
	return &usageError{err: err, usage: func(w io.Writer) { printUsage(fs, w) }}
}

// usageErrorf is usageErr of a new error.
func usageErrorf(fs *flag.FlagSet, format string, args ...any) error {
	return usageErr(fs, fmt.Errorf(format, args...))
}
