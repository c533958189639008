package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcast/shardcast"
)

func runSub(ctx context.Context, args []string, io stdio) error {
	var (
		t     target
		lf    layoutFlags
		count int
		raw   bool
	)
	fs := newFlagSet("sub", "(-cluster host:port | -shards a,b,c) [flags] CHANNEL...")
	t.register(fs)
	lf.register(fs)
	lf.registerAgreement(fs)
	fs.IntVar(&count, "n", 0, "exit after this many messages (0: run until interrupted)")
	fs.BoolVar(&raw, "raw", false, "payloads carry no shardcast envelope (publishers that are not shardcast); lag is then unknown")
	if err := parseFlags(fs, args, io.out); err != nil {
		return err
	}
	if err := t.check(false); err != nil {
		return usageErr(fs, err)
	}
	channels := fs.Args()
	if len(channels) == 0 {
		return usageErrorf(fs, "give at least one CHANNEL")
	}
	for _, ch := range channels {
		if err := shardcast.ValidateChannel(ch); err != nil {
			return usageErr(fs, err)
		}
	}
	if count < 0 {
		return usageErrorf(fs, "-n %d: want >= 0", count)
	}
	if _, err := lf.layout(); err != nil {
		return usageErr(fs, err)
	}
	if err := lf.agreement().Validate(); err != nil {
		return usageErr(fs, fmt.Errorf("-app: %w", err))
	}

	p := &printer{w: io.out, limit: int64(count), done: make(chan struct{})}
	opts := shardcast.Options{
		Handler: p.print,
		OnEvent: func(e shardcast.Event) { fmt.Fprintln(io.err, "event:", e) },
		Raw:     raw,
		// One worker keeps the printed order the order of arrival.
		Workers: 1,
	}
	b, desc, err := openBroker(&t, &lf, opts, io.getenv)
	if err != nil {
		return err
	}
	defer func() { _ = b.Close() }()
	if err := b.Subscribe(ctx, channels...); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("subscribe: %w", err)
	}
	fmt.Fprintf(io.err, "subscribed to %d channel(s) through the %s; Ctrl-C to stop\n", len(channels), desc)
	select {
	case <-ctx.Done():
	case <-p.done:
	}
	if err := b.Close(); err != nil && !errors.Is(err, shardcast.ErrClosed) {
		return err
	}
	fmt.Fprintf(io.err, "received %d message(s)\n", p.printed())
	return nil
}

// printer writes each message as CHANNEL, publish→receive lag and payload,
// tab-separated, one a line, and closes done after limit messages.
type printer struct {
	w     io.Writer
	limit int64 // 0: no limit
	done  chan struct{}

	mu   sync.Mutex
	seen atomic.Int64
	once sync.Once
}

func (p *printer) print(m shardcast.Message) {
	at := time.Now()
	n := p.seen.Add(1)
	if p.limit > 0 && n > p.limit {
		return
	}
	p.mu.Lock()
	fmt.Fprintf(p.w, "%s\t%s\t%s\n", m.Channel, lagString(m.PublishedAt, at), m.Payload)
	p.mu.Unlock()
	if p.limit > 0 && n == p.limit {
		p.once.Do(func() { close(p.done) })
	}
}

// lagString is "lag=" and the time from publish to receipt, or "lag=?"
// when the message carried no publish time.
func lagString(published, received time.Time) string {
	if published.IsZero() {
		return "lag=?"
	}
	d := received.Sub(published)
	return "lag=" + strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 3, 64) + "ms"
}

// printed is the number of messages written.
func (p *printer) printed() int64 {
	n := p.seen.Load()
	if p.limit > 0 {
		n = min(n, p.limit)
	}
	return n
}
