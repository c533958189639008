// Command shardcast is the operator's tool for shardcast deployments: it
// shows where a layout's partitions live on a running Redis Cluster and
// how loaded each master is, computes the wire key and owner of a channel,
// and publishes or subscribes through either engine as a smoke test after
// a deploy.
//
//	shardcast inspect -cluster host:port [-app name] [-partitions N] [-prefix p] [-sample 1s] [-json]
//	shardcast inspect -shards a:6379,b:6379,c:6379 [-app name] [-control host:port] [-sample 1s] [-json]
//	shardcast key [-partitions N] [-prefix p] [-cluster host:port | -shards a,b,c] [-app name] CHANNEL...
//	shardcast sub (-cluster host:port | -shards a,b,c) [-app name] [-follow] [-n N] CHANNEL...
//	shardcast pub (-cluster host:port | -shards a,b,c) [-app name] [-follow] CHANNEL [MESSAGE...]   (stdin lines without MESSAGE)
//	shardcast tags [-partitions N] [-json]
//	shardcast relayout -shards a,b,c -control host:port [-app name] [-abort]
//	shardcast relayout -cluster host:port [-partitions N] [-prefix p] [-app name] [-abort]
//	shardcast version
//	shardcast help [COMMAND]
//
// inspect and key read the application's layout record (-app names it;
// with -shards it is on -control, by default the first instance). On a
// cluster they use the recorded partitions and prefix unless -partitions
// or -prefix is given; flags or a -shards list that differ from the
// record are reported as a warning (key writes its notes to stderr).
//
// pub and sub run a broker, which meets the application's layout record
// (-app names it): with -follow it adopts the layout the running brokers
// recorded instead of failing when -partitions, -prefix or -shards differ.
//
// Addresses are host:port or redis:// and rediss:// URLs (the -shards of
// pub and sub also take redis+sentinel:// ones). -user, -password (or the
// REDISCLI_AUTH environment variable), -tls and -tls-ca FILE apply to
// every host:port address; -sentinel-user and -sentinel-password (or
// SHARDCAST_SENTINEL_PASSWORD) log in to the Sentinels.
//
// It exits 0 on success and after help that was asked for (-h, help;
// printed on stdout), 1 when a command fails, and 2 for a wrong command
// line, whose usage it then prints on stderr. Every message carries one
// prefix: "shardcast:", or "shardcast COMMAND:".
//
// Install it with
//
//	go install github.com/shardcast/shardcast/cmd/shardcast@latest
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second Ctrl-C kills at once
	}()
	code := cli(ctx, os.Args[1:], stdio{in: os.Stdin, out: os.Stdout, err: os.Stderr, getenv: os.Getenv})
	stop()
	os.Exit(code)
}

// cli runs one command line, reports its error on io.err and returns the
// exit status (exitOK, exitFailed, exitUsage).
func cli(ctx context.Context, args []string, io stdio) int {
	err := run(ctx, args, io)
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(io.err, message(err))
	var u *usageError
	if errors.As(err, &u) {
		if u.usage != nil {
			fmt.Fprintln(io.err)
			u.usage(io.err)
		}
		return exitUsage
	}
	return exitFailed
}

// stdio is what a subcommand reads, writes and looks up; tests hand in
// buffers and a fixed environment.
type stdio struct {
	in     io.Reader
	out    io.Writer
	err    io.Writer
	getenv func(string) string
}

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, io stdio) error
}

func commands() []command {
	return []command{
		{"inspect", "show partitions, slots and load per master (-cluster) or per instance (-shards)", runInspect},
		{"key", "print the partition, tag, slot, wire key and owner of channels", runKey},
		{"sub", "subscribe to channels and print each message with its publish→receive lag", runSub},
		{"pub", "publish messages (arguments or stdin lines) to a channel", runPub},
		{"tags", "print the shipped tag table of a partition count", runTags},
		{"relayout", "move running brokers to a new instance list, partition count or prefix (online re-layout)", runRelayout},
		{"version", "print the version of this build", runVersion},
		{"help", "print this list, or a command's flags (help COMMAND)", runHelp},
	}
}

// lookup returns the subcommand called name.
func lookup(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// run dispatches args[0] to its subcommand. It is cli without the exit
// status: tests call it directly. Help that was asked for is printed on
// io.out and returns nil.
func run(ctx context.Context, args []string, io stdio) error {
	if io.getenv == nil {
		io.getenv = func(string) string { return "" }
	}
	if len(args) == 0 {
		return &usageError{err: errors.New("no command given"), usage: usage}
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(io.out)
		return nil
	}
	c, ok := lookup(args[0])
	if !ok {
		if strings.HasPrefix(args[0], "-") {
			return &usageError{err: fmt.Errorf("flag %s before the command; flags follow it", args[0]), usage: usage}
		}
		return &usageError{err: fmt.Errorf("unknown command %q", args[0]), usage: usage}
	}
	err := c.run(ctx, args[1:], io)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return nil
	}
	return &commandError{name: c.name, err: err}
}

// runHelp prints the command list, or with an argument that command's
// usage and flags, on io.out.
func runHelp(ctx context.Context, args []string, io stdio) error {
	fs := newFlagSet("help", "[COMMAND]")
	if err := parseFlags(fs, args, io.out); err != nil {
		return err
	}
	switch fs.NArg() {
	case 0:
		usage(io.out)
		return nil
	case 1:
		c, ok := lookup(fs.Arg(0))
		if !ok {
			return usageErrorf(fs, "unknown command %q", fs.Arg(0))
		}
		return c.run(ctx, []string{"-h"}, io)
	}
	return usageErrorf(fs, "give one COMMAND at most, got %q", fs.Args())
}

// usage writes the command list.
func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: shardcast <command> [flags] [arguments]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run shardcast help <command> for a command's flags.")
}
