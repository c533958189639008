package centrifugebroker

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/centrifugal/centrifuge"
)

// controlQueueSize is how many control messages may wait for the control
// goroutine; one more is dropped, counted and logged. A node's control
// traffic is a few messages a second per node (node info, the odd
// disconnect or survey), so a full queue means the control goroutine is
// stuck or the channel is flooded.
const controlQueueSize = 4096

// controls runs the node's control commands on a goroutine of their own,
// in the order received, as Centrifuge's Redis broker does on its own
// control processors: a command may block (a server-side subscribe waits
// for the broker's Subscribe; survey and notification handlers are the
// application's), and run on the engine's worker it would hold up the
// publications of every channel that worker carries, which with one
// worker per core is most of them.
//
// Adding never waits. The engine delivers a control message on its
// worker, or, with InlineHandling, on the subscribe connection's read
// loop; a command the control goroutine runs may wait for a reply on that
// very connection (a server-side subscribe calls Broker.Subscribe), so
// waiting there for room would hold up the reply the command waits for,
// and every publication on the connection with it.
type controls struct {
	queue chan []byte
	stop  chan struct{}
	done  sync.WaitGroup

	dropped atomic.Uint64
	limit   logLimit // of log lines about drops
	log     *slog.Logger
}

func startControls(handle func([]byte), log *slog.Logger) *controls {
	c := &controls{queue: make(chan []byte, controlQueueSize), stop: make(chan struct{}), log: log}
	c.done.Go(func() {
		for {
			select {
			case cmd := <-c.queue:
				handle(cmd)
			case <-c.stop:
				return
			}
		}
	})
	return c
}

// add queues cmd, or drops it when the queue is full, counting and (at
// most once per dropLogEvery) logging the drop. After close, a queued
// command is never run.
func (c *controls) add(cmd []byte) {
	select {
	case c.queue <- cmd:
		return
	default:
	}
	n := c.dropped.Add(1)
	if !c.limit.allow() {
		return
	}
	c.log.Warn("centrifugebroker: control queue full, dropped a control message (the control goroutine is stuck, or the control channel flooded)",
		"queued", controlQueueSize, "dropped_total", n)
}

// close stops the goroutine once the command it runs, if any, returns;
// commands still queued are dropped, as they would be after the engine's
// Close.
func (c *controls) close() {
	close(c.stop)
	c.done.Wait()
}

// RegisterControlEventHandler is called by node.Run before
// RegisterBrokerEventHandler: it subscribes the node to the control
// channel (waiting up to Config.CallTimeout) and hands every control
// message meant for this node to h. An error fails node.Run.
func (b *Broker) RegisterControlEventHandler(h centrifuge.ControlEventHandler) error {
	b.controls.Store(&h)
	ctx, cancel := b.callCtx()
	defer cancel()
	if err := b.engine.Subscribe(ctx, b.control); err != nil {
		return fmt.Errorf("centrifugebroker: subscribe control channel %q: %w", b.control, err)
	}
	return nil
}

// PublishControl sends a control command to the node with ID nodeID, or
// to every node if nodeID is empty. Every node subscribes to the one
// control channel and drops commands meant for another node; Centrifuge
// itself ignores the commands a node sent. shardKey is unused, as in
// Centrifuge's own brokers.
func (b *Broker) PublishControl(data []byte, nodeID, _ string) error {
	return b.publish(b.control, encodeControl(nodeID, data))
}

// handleControl hands one control command to Centrifuge, on the control
// goroutine.
func (b *Broker) handleControl(cmd []byte) {
	if h := b.controls.Load(); h != nil {
		_ = (*h).HandleControl(cmd) // Centrifuge logs its own errors
	}
}
