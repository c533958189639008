package shardcast

import "time"

// The values zero fields take (Options.WithDefaults, ConnOptions.WithDefaults
// and Agreement.WithDefaults apply them), and the two fixed bounds beside
// them: MaxSubscribeConns and HotMinSamples.
const (
	// Options.
	DefaultWorkers        = 16
	DefaultQueueSize      = 1024
	DefaultSubscribeBatch = 512
	DefaultMaxPayload     = 1 << 20
	// DefaultMaxAsyncPublishes is Options.MaxAsyncPublishes' default.
	DefaultMaxAsyncPublishes = 4096

	// Options' hot-channel detection.
	DefaultHotSampleRate = 0.01
	DefaultHotWindow     = time.Minute
	DefaultHotTopK       = 32
	DefaultHotShare      = 0.2
	// HotMinSamples is the fewest sampled messages a node must have in a
	// window for a channel of it to raise EventHotChannel: below it, one
	// channel's share says little (at the default rate, 100 samples a
	// minute is about 170 messages a second).
	HotMinSamples = 100

	// ConnOptions; MaxSubscribeConns is the most SubscribeConns may be.
	DefaultSubscribeConns   = 1
	MaxSubscribeConns       = 16
	DefaultDialTimeout      = 5 * time.Second
	DefaultReconnectMin     = 50 * time.Millisecond
	DefaultReconnectMax     = 2 * time.Second
	DefaultRecoveryInterval = 250 * time.Millisecond
	DefaultCommandTimeout   = 10 * time.Second
	DefaultHealthInterval   = time.Second
	DefaultHealthTimeout    = 3 * time.Second
	DefaultWriteTimeout     = 3 * time.Second
	DefaultReplyTimeout     = 3 * time.Second

	// DefaultHeartbeat is Agreement.Heartbeat's default.
	DefaultHeartbeat = 5 * time.Second

	// DefaultRelayProbeInterval is ConnOptions.ProbeInterval when it is
	// zero and a broker subscribes on replicas (SubscribeOn other than
	// Masters, in either engine): a replica cut off from its master stays
	// connected and quiet, and only a probe finds it.
	DefaultRelayProbeInterval = time.Second
)
