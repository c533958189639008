package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	goio "io"

	"github.com/shardcast/shardcast"
)

func runPub(ctx context.Context, args []string, io stdio) error {
	var (
		t     target
		lf    layoutFlags
		raw   bool
		keyed bool
	)
	fs := newFlagSet("pub", "(-cluster host:port | -shards a,b,c) [flags] CHANNEL [MESSAGE...]  (without MESSAGE: one message per stdin line)")
	t.register(fs)
	lf.register(fs)
	lf.registerAgreement(fs)
	fs.BoolVar(&raw, "raw", false, "publish payloads without the shardcast envelope (for subscribers that are not shardcast)")
	fs.BoolVar(&keyed, "keyed", false, "stdin lines are \"CHANNEL PAYLOAD\" (split at the first space); no CHANNEL argument")
	if err := parseFlags(fs, args, io.out); err != nil {
		return err
	}
	if err := t.check(false); err != nil {
		return usageErr(fs, err)
	}
	var channel string
	var messages []string
	switch {
	case keyed && fs.NArg() > 0:
		return usageErrorf(fs, "-keyed: the channels come from stdin; give no arguments")
	case !keyed && fs.NArg() == 0:
		return usageErrorf(fs, "give a CHANNEL")
	case !keyed:
		channel, messages = fs.Arg(0), fs.Args()[1:]
		if err := shardcast.ValidateChannel(channel); err != nil {
			return usageErr(fs, err)
		}
	}
	if _, err := lf.layout(); err != nil {
		return usageErr(fs, err)
	}
	if err := lf.agreement().Validate(); err != nil {
		return usageErr(fs, fmt.Errorf("-app: %w", err))
	}
	b, desc, err := openBroker(&t, &lf, shardcast.Options{Raw: raw}, io.getenv)
	if err != nil {
		return err
	}
	defer func() { _ = b.Close() }()

	sent := 0
	publish := func(channel string, payload []byte) error {
		if err := b.Publish(ctx, channel, payload); err != nil {
			return fmt.Errorf("publish message %d: %w", sent+1, err)
		}
		sent++
		return nil
	}
	if len(messages) > 0 {
		for _, m := range messages {
			if err := publish(channel, []byte(m)); err != nil {
				return err
			}
		}
	} else {
		lines, readErr := readLines(ctx, io.in)
		for line := 1; ; line++ {
			var text []byte
			var more bool
			select {
			case text, more = <-lines:
			case <-ctx.Done():
			}
			if !more {
				break
			}
			ch, payload := channel, text
			if keyed {
				var ok bool
				if ch, payload, ok = splitKeyed(payload); !ok {
					return fmt.Errorf("stdin line %d: want \"CHANNEL PAYLOAD\"", line)
				}
			}
			if err := publish(ch, payload); err != nil {
				return err
			}
		}
		if ctx.Err() != nil {
			// Ctrl-C or SIGTERM while stdin was still open: readErr
			// cannot be read, the reader may still run.
			return fmt.Errorf("interrupted after %d message(s): %w", sent, context.Cause(ctx))
		}
		if err := readErr(); err != nil {
			return fmt.Errorf("reading stdin: %w", err)
		}
	}
	if keyed {
		fmt.Fprintf(io.err, "published %d message(s) through the %s\n", sent, desc)
	} else {
		fmt.Fprintf(io.err, "published %d message(s) to %q through the %s\n", sent, channel, desc)
	}
	return b.Close()
}

// splitKeyed splits a -keyed line at its first space.
func splitKeyed(line []byte) (channel string, payload []byte, ok bool) {
	i := bytes.IndexByte(line, ' ')
	if i <= 0 {
		return "", nil, false
	}
	return string(line[:i]), line[i+1:], true
}

// readLines reads r's lines on a goroutine of its own, so that the caller
// can stop waiting for one when ctx ends: a read of a terminal or a pipe
// cannot be cut short. The channel closes at the end of r, or when ctx
// ends; err, called once it closed, tells why the reading stopped (nil at
// the end of r). A goroutine stopped by ctx ends at r's next line or end.
func readLines(ctx context.Context, r goio.Reader) (lines <-chan []byte, err func() error) {
	out := make(chan []byte)
	var readErr error
	go func() {
		defer close(out)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), shardcast.DefaultMaxPayload+1024)
		for sc.Scan() {
			select {
			case out <- bytes.Clone(sc.Bytes()):
			case <-ctx.Done():
				return
			}
		}
		readErr = sc.Err()
	}()
	return out, func() error { return readErr }
}
