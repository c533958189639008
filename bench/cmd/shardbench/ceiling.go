package main

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/shardcast/shardcast/bench/internal/measure"
)

// ceilingClients caps redis-benchmark's connections (-c): the ceiling of
// a publisher count runs as many connections as there are publishers, at
// most this many, beside every run of that count for drift.
const ceilingClients = 16

// ceilingRun measures what Redis itself moves on this machine: the C
// benchmark tool, redis-benchmark -P 16, publishing into one subscriber
// that does nothing but count bytes. A redis-cli subscriber cannot keep
// up on this machine (Redis disconnects it at the pubsub output buffer
// limit), so the subscriber is a raw Go socket reader: every message push
// has the same size (fixed-width channel names, fixed payload), so
// deliveries = bytes after the subscribe confirmations / push size.
func ceilingRun(ctx context.Context, addr string, clients int) (res tpResult) {
	clients = min(clients, ceilingClients)
	res.Channels, res.PayloadBytes = cfg.channels, cfg.payload
	host, port, _ := strings.Cut(addr, ":")
	base := measure.Clients([]string{addr})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	defer conn.Close()
	var cmd strings.Builder
	fmt.Fprintf(&cmd, "*%d\r\n$9\r\nSUBSCRIBE\r\n", cfg.channels+1)
	var confirm int
	for i := range cfg.channels {
		ch := fmt.Sprintf("bench:%012d", i) // redis-benchmark's __rand_int__ form
		fmt.Fprintf(&cmd, "$%d\r\n%s\r\n", len(ch), ch)
		confirm += len(fmt.Sprintf("*3\r\n$9\r\nsubscribe\r\n$%d\r\n%s\r\n:%d\r\n", len(ch), ch, i+1))
	}
	if _, err := conn.Write([]byte(cmd.String())); err != nil {
		res.Error = err.Error()
		return res
	}
	push := len(fmt.Sprintf("*3\r\n$7\r\nmessage\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", 18, "bench:000000000000", cfg.payload, strings.Repeat("x", cfg.payload)))
	var got atomic.Uint64
	eof := make(chan struct{})
	go func() {
		defer close(eof)
		buf := make([]byte, 1<<20)
		for {
			n, err := conn.Read(buf)
			got.Add(uint64(n))
			if err != nil {
				return
			}
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for got.Load() < uint64(confirm) {
		if time.Now().After(deadline) {
			res.Error = "the subscriber did not get its confirmations"
			return res
		}
		time.Sleep(5 * time.Millisecond)
	}
	res.Connections = measure.Clients([]string{addr}) - base // the subscriber
	payload := strings.Repeat("x", cfg.payload)
	pub := exec.CommandContext(ctx, "redis-benchmark", "-h", host, "-p", port, "-c", strconv.Itoa(clients), "-P", "16",
		"-n", "2000000000", "-r", strconv.Itoa(cfg.channels), "-q", "PUBLISH", "bench:__rand_int__", payload)
	pub.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := pub.Start(); err != nil {
		res.Error = "redis-benchmark: " + err.Error()
		return res
	}
	defer func() { _ = pub.Process.Kill(); _ = pub.Wait() }()
	sleepCtx(ctx, cfg.warmup)
	clientCPU := func() time.Duration {
		a, _ := measure.PIDCPU(pub.Process.Pid)
		return a + measure.ProcessCPU()
	}
	b0, c0, r0, t0 := got.Load(), clientCPU(), measure.RedisCPU([]string{addr}), time.Now()
	sleepCtx(ctx, cfg.duration)
	b1, c1, r1, t1 := got.Load(), clientCPU(), measure.RedisCPU([]string{addr}), time.Now()
	res.ClientBusy = (c1 - c0).Seconds() / t1.Sub(t0).Seconds()
	res.RedisBusy = (r1 - r0).Seconds() / t1.Sub(t0).Seconds()
	res.RedisOutBuf = measure.IntField(addr, "clients", "client_recent_max_output_buffer")
	res.Connections += clients
	select {
	case <-eof:
		res.Error = "the counting subscriber was disconnected (output buffer limit)"
		return res
	default:
	}
	res.Seconds = t1.Sub(t0).Seconds()
	res.Delivered = (b1 - b0) / uint64(push)
	res.Published = res.Delivered
	res.Rate = float64(res.Delivered) / res.Seconds
	if res.Delivered > 0 {
		res.ClientCPUns = float64(c1-c0) / float64(res.Delivered)
		res.RedisCPUns = float64(r1-r0) / float64(res.Delivered)
	}
	res.Note = "redis-benchmark + byte-counting subscriber; no latency measured"
	return res
}
