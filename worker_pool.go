package shardcast

import "github.com/shardcast/shardcast/internal/pool"

// WorkerPool runs the Handler on a fixed set of worker goroutines, each fed
// by its own bounded queue: the pool every broker runs its deliveries on,
// offered on its own for applications that take messages from elsewhere
// too. A message goes to worker hash(channel) mod N, so the messages of
// one channel are handled in the order they were submitted and never
// concurrently, while different channels spread over workers.
//
// Submit never blocks: it is called from socket read loops, and a read loop
// that waits for a slow handler makes Redis buffer for it until Redis drops
// the whole connection. A full queue drops the message instead: Submit
// returns false and Dropped counts it.
//
// A panic in the Handler is recovered: the message counts as a panic (see
// Panics), not as delivered, and the worker goes on with its next message.
// Killing the worker would stall every channel routed to it; killing the
// process would take down every subscription of the node.
//
// A broker reports its pool's drops and panics as EventDropped and
// EventError events; a WorkerPool of one's own only counts them.
type WorkerPool struct {
	p *pool.Pool
}

// NewWorkerPool starts a pool with the worker settings of o: o.Workers
// workers (DefaultWorkers if zero), each with a queue of o.QueueSize
// messages (DefaultQueueSize if zero) plus the batch of up to 64 it has
// taken and not handled yet, passing messages to o.Handler (nil discards
// them). Its other fields do not apply to a pool of one's own. The caller
// owns the pool and must Close it to stop its goroutines.
func NewWorkerPool(o Options) *WorkerPool {
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.QueueSize <= 0 {
		o.QueueSize = DefaultQueueSize
	}
	return &WorkerPool{p: pool.New(pool.Config{Workers: o.Workers, QueueSize: o.QueueSize, Handler: pool.HandlerOf(o.Handler)})}
}

// Submit queues m for its channel's worker and reports whether it was
// queued. It never blocks and allocates nothing. When the worker's queue
// is full, m is dropped and counted (see Dropped). After Close, Submit
// returns false without queueing or counting m: the pool is gone, not
// overloaded.
func (p *WorkerPool) Submit(m Message) bool { return p.p.Submit(pool.Message(m)) }

// Dropped returns the number of messages Submit dropped because a queue was
// full, since the pool started.
func (p *WorkerPool) Dropped() uint64 { return p.p.Dropped() }

// Delivered returns the number of messages the handler returned from
// normally, since the pool started. A worker publishes its count when it
// finishes a batch and at most every 8 calls before, so the count may
// trail by the calls since.
func (p *WorkerPool) Delivered() uint64 { return p.p.Delivered() }

// Panics returns the number of handler calls that panicked, since the pool
// started.
func (p *WorkerPool) Panics() uint64 { return p.p.Panics() }

// QueueDepth returns the number of messages waiting in the worker queues
// now, summed over workers; a worker busy with fast calls may still count
// up to 7 it has handed to the handler (see Delivered).
func (p *WorkerPool) QueueDepth() int { return p.p.QueueDepth() }

// QueueHighWater returns the deepest any one worker's backlog has been
// since the pool started (see Stats.QueueHighWater).
func (p *WorkerPool) QueueHighWater() int { return p.p.QueueHighWater() }

// Latency returns the pool's lag and handler-duration histograms since it
// started. It allocates the snapshots; call it at a metrics scrape, not
// per message.
func (p *WorkerPool) Latency() LatencyStats {
	lag, handling := p.p.Latency()
	return LatencyStats{Lag: HistogramSnapshot(lag), HandlerTime: HistogramSnapshot(handling)}
}

// Close stops accepting messages, lets every worker handle the messages
// already in its queue (a message Submit accepted is handed to the
// handler) and waits for the workers to exit; a handler that never returns
// therefore keeps Close from returning. Close is safe to call more than
// once and from several goroutines. It must not be called from the
// handler, which it would wait for.
func (p *WorkerPool) Close() { p.p.Close() }
