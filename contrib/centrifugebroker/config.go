package centrifugebroker

import (
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/sharded"
)

// Default values applied to a zero Config field.
const (
	DefaultCallTimeout    = 10 * time.Second
	DefaultControlChannel = "centrifuge.control"
	DefaultKeyPrefix      = "centrifuge."
)

// Config configures a Broker. Exactly one of Cluster and Sharded is set;
// every other zero field means its default.
//
// The adapter builds the shardcast broker itself and owns its
// Options.Handler and Options.OnEvent: they must be left nil. It also
// always runs the engine with Options.ReusePayloads and InlineHandling,
// whatever those fields hold. ReusePayloads: its Handler copies what
// Centrifuge may keep (a publication's data) and nothing else outlives
// the call, so the engine's copy of every received message would be a
// second one. InlineHandling: the Handler decodes a message and hands it
// to Centrifuge's hub, which queues it to each subscriber's writer and
// never waits for the broker (a client whose write fails is closed on a
// goroutine of its own; control messages go to the adapter's own queue),
// so a read loop may run it instead of waking a worker. Every other
// engine setting (addresses, partitions, prefix, workers, queues,
// connection options, Options.Logger) is the user's. Two defaults differ
// from the engine's: a zero Options.Workers means one worker per core
// (GOMAXPROCS, at most shardcast.DefaultWorkers), and then a zero
// QueueSize means the engine's default total queue capacity
// (DefaultQueueSize × DefaultWorkers messages) shared among them.
type Config struct {
	// Cluster runs Pub/Sub on a Redis Cluster with the cluster engine
	// (sharded Pub/Sub, channels grouped by node).
	Cluster *cluster.Config
	// Sharded runs Pub/Sub on isolated Redis instances with the sharded
	// engine (jump hash over Sharded.Addrs).
	Sharded *sharded.Config

	// CallTimeout bounds each call Centrifuge makes (Subscribe,
	// Unsubscribe, Publish, PublishJoin, PublishLeave, PublishControl):
	// Centrifuge passes no context (default 10s). A Subscribe waits while
	// its Redis node is unreachable, up to this long. Publishes that start
	// close together share one deadline, so a publish may be cut up to
	// 1/64 of CallTimeout sooner.
	CallTimeout time.Duration
	// ControlChannel is the channel that carries Centrifuge's node-to-node
	// control messages (default "centrifuge.control"). It is reserved:
	// clients cannot subscribe or publish to it. Every node of one
	// application must use the same value, and applications sharing Redis
	// different ones (or different engine prefixes).
	ControlChannel string
	// KeyPrefix starts the name of every Redis key the Broker writes
	// (history streams and their meta, idempotent publish results;
	// default "centrifuge."). On a cluster the keys also carry the
	// channel's partition tag and the engine's Prefix, so that they live
	// in the channel's slot. Applications sharing Redis instances use
	// different values.
	KeyPrefix string
	// NewEpochOnServerChange starts a channel's history over, under a new
	// epoch, whenever the Redis server process holding it changed since
	// its last write: a replica promoted by a failover, the server
	// restarted, the slot migrated; and a map channel's (MapBroker), since
	// its last call. Clients of such channels then recover from scratch
	// (told, Recovered false) even when nothing was lost.
	//
	// Off (the default, as Centrifuge's RedisBroker does), the epoch goes
	// on and clients recover across a failover; but a failover can lose
	// the dead master's last writes (replication is asynchronous), and so
	// can a restart from the last snapshot. Offsets given out for lost
	// publications are then given out again under the same epoch, to new
	// ones, and a client that received a lost one is later told it
	// recovered although it missed the new one. Turn it on where a silent
	// miss is worse than a resync after every failover.
	NewEpochOnServerChange bool
	// Logger receives the adapter's warnings: dropped frames (rate
	// limited), losses and the resubscribes they cause (default
	// slog.Default()). The engine logs to its own Options.Logger.
	Logger *slog.Logger
}

// withDefaults returns a copy of c with every zero field set to its
// default, or an error wrapping shardcast.ErrInvalidConfig.
func (c Config) withDefaults() (Config, error) {
	switch {
	case c.Cluster == nil && c.Sharded == nil:
		return c, fmt.Errorf("%w: centrifugebroker: set one of Config.Cluster and Config.Sharded", shardcast.ErrInvalidConfig)
	case c.Cluster != nil && c.Sharded != nil:
		return c, fmt.Errorf("%w: centrifugebroker: set only one of Config.Cluster and Config.Sharded", shardcast.ErrInvalidConfig)
	case c.CallTimeout < 0:
		return c, fmt.Errorf("%w: centrifugebroker: CallTimeout = %v, want >= 0", shardcast.ErrInvalidConfig, c.CallTimeout)
	}
	opts := c.engineOptions()
	if opts.Handler != nil || opts.OnEvent != nil {
		return c, fmt.Errorf("%w: centrifugebroker: the adapter sets the engine's Options.Handler and Options.OnEvent; leave them nil", shardcast.ErrInvalidConfig)
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	if c.ControlChannel == "" {
		c.ControlChannel = DefaultControlChannel
	}
	if c.KeyPrefix == "" {
		c.KeyPrefix = DefaultKeyPrefix
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// engineOptions returns the engine Options the user configured.
func (c Config) engineOptions() shardcast.Options {
	if c.Cluster != nil {
		return c.Cluster.Options
	}
	return c.Sharded.Options
}

// newEngine builds the shardcast broker of c with handler and onEvent in
// place of the user's (nil) ones. c must have passed withDefaults.
func (c Config) newEngine(handler shardcast.Handler, onEvent func(shardcast.Event)) (shardcast.Broker, error) {
	if c.Cluster != nil {
		cfg := *c.Cluster
		cfg.Options = ownOptions(cfg.Options, handler, onEvent)
		return cluster.New(cfg)
	}
	cfg := *c.Sharded
	cfg.Options = ownOptions(cfg.Options, handler, onEvent)
	return sharded.New(cfg)
}

// ownOptions returns the user's engine Options o with what the adapter
// owns put in: its handler and onEvent, Options.ReusePayloads (deliver
// copies what Centrifuge may keep), Options.InlineHandling (deliver never
// waits for the broker), and its Workers and QueueSize defaults.
func ownOptions(o shardcast.Options, handler shardcast.Handler, onEvent func(shardcast.Event)) shardcast.Options {
	o.Handler, o.OnEvent = handler, onEvent
	o.Workers, o.QueueSize = workers(o)
	o.ReusePayloads = true
	o.InlineHandling = true
	return o
}

// workers returns the engine's Options.Workers and QueueSize: the user's,
// or when left zero the adapter's defaults. The handler only decodes a
// message and hands it to Centrifuge's hub, which encodes it once and
// queues it to each subscriber's writer without blocking, so one worker
// per core (GOMAXPROCS) keeps every core busy; the engine's default of 16
// workers only adds goroutine hand-offs and splits the messages of one
// Redis read into smaller bursts, and the clients' writers then merge
// fewer messages per WebSocket frame. The queue size default keeps the
// engine's total capacity: DefaultQueueSize messages for each of
// DefaultWorkers, shared among the workers there are.
func workers(o shardcast.Options) (workers, queueSize int) {
	workers, queueSize = o.Workers, o.QueueSize
	if workers != 0 {
		return workers, queueSize
	}
	workers = max(1, min(runtime.GOMAXPROCS(0), shardcast.DefaultWorkers))
	if queueSize == 0 {
		queueSize = shardcast.DefaultQueueSize * shardcast.DefaultWorkers / workers
	}
	return workers, queueSize
}
