package shardcast

import "errors"

// ErrSilentPath is the Err of an EventInterrupted raised by a delivery
// probe (ConnOptions.ProbeInterval): a probe the broker published through
// a partition or instance did not come back on its own subscribe
// connection within ProbeTimeout, although the connection answers pings.
// The subscriptions are renewed, and EventRestored follows once a probe
// returns.
var ErrSilentPath = errors.New("shardcast: delivery probe not received (path silent)")

// ProbeChannelPrefix starts the names of the channels delivery probes
// travel on. Probes never reach the Handler; applications should not use
// channels with this prefix.
const ProbeChannelPrefix = "shardcast.probe:"
