package centrifugebroker

import (
	"fmt"
	"sync"

	"github.com/centrifugal/centrifuge"
)

// controlQueueSize is how many control messages may wait for the control
// goroutine before the engine's worker that received the next one waits
// for room.
const controlQueueSize = 256

// controls runs the node's control commands on a goroutine of their own,
// in the order received, as Centrifuge's Redis broker does on its own
// control processors: a command may block (a server-side subscribe waits
// for the broker's Subscribe; survey and notification handlers are the
// application's), and run on the engine's worker it would hold up the
// publications of every channel that worker carries, which with one
// worker per core is most of them.
type controls struct {
	queue chan []byte
	stop  chan struct{}
	done  sync.WaitGroup
}

func startControls(handle func([]byte)) *controls {
	c := &controls{queue: make(chan []byte, controlQueueSize), stop: make(chan struct{})}
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

// add queues cmd, waiting for room; after close it drops it.
func (c *controls) add(cmd []byte) {
	select {
	case c.queue <- cmd:
	case <-c.stop:
	}
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
