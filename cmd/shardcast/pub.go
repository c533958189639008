package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"

	"github.com/shardcast/shardcast"
)

func runPub(ctx context.Context, args []string, io stdio) error {
	var (
		t   target
		lf  layoutFlags
		raw bool
	)
	fs := newFlagSet("pub", "(-cluster host:port | -shards a,b,c) [flags] CHANNEL [MESSAGE...]  (without MESSAGE: one message per stdin line)", io.err)
	t.register(fs)
	lf.register(fs)
	fs.BoolVar(&raw, "raw", false, "publish payloads without the shardcast envelope (for subscribers that are not shardcast)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("pub: give a CHANNEL")
	}
	channel, messages := fs.Arg(0), fs.Args()[1:]
	if err := shardcast.ValidateChannel(channel); err != nil {
		return err
	}
	b, desc, err := openBroker(&t, &lf, shardcast.Options{Raw: raw}, io.getenv)
	if err != nil {
		return err
	}
	defer func() { _ = b.Close() }()

	sent := 0
	publish := func(payload []byte) error {
		if err := b.Publish(ctx, channel, payload); err != nil {
			return fmt.Errorf("publish message %d: %w", sent+1, err)
		}
		sent++
		return nil
	}
	if len(messages) > 0 {
		for _, m := range messages {
			if err := publish([]byte(m)); err != nil {
				return err
			}
		}
	} else {
		sc := bufio.NewScanner(io.in)
		sc.Buffer(make([]byte, 64<<10), shardcast.DefaultMaxPayload+1)
		for sc.Scan() {
			if err := publish(sc.Bytes()); err != nil {
				return err
			}
		}
		if err := sc.Err(); err != nil {
			return fmt.Errorf("reading stdin: %w", err)
		}
	}
	fmt.Fprintf(io.err, "published %d message(s) to %q through the %s\n", sent, channel, desc)
	return b.Close()
}
