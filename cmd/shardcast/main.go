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
// Addresses are host:port or redis:// and rediss:// URLs. -user,
// -password (or the REDISCLI_AUTH environment variable), -tls and
// -tls-ca FILE apply to every host:port address.
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
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // a second Ctrl-C kills at once
	}()
	err := run(ctx, os.Args[1:], stdio{in: os.Stdin, out: os.Stdout, err: os.Stderr, getenv: os.Getenv})
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "shardcast:", err)
		os.Exit(1)
	}
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
	}
}

// run dispatches args[0] to its subcommand. It is main without the process:
// tests call it directly.
func run(ctx context.Context, args []string, io stdio) error {
	if io.getenv == nil {
		io.getenv = func(string) string { return "" }
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		usage(io.err)
		if len(args) == 0 {
			return errors.New("no command given")
		}
		return flag.ErrHelp
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], io)
		}
	}
	usage(io.err)
	return fmt.Errorf("unknown command %q", args[0])
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: shardcast <command> [flags] [arguments]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run shardcast <command> -h for a command's flags.")
}
