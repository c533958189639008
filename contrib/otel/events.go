package shardcastotel

import "github.com/shardcast/shardcast"

// Events counts a broker's events by kind, for shardcast.events. A broker
// takes its event hook in its Config, before the instruments over it can
// be registered, so the count lives apart: create the Events first, hand
// its OnEvent (or Chain) to the broker's shardcast.Options.OnEvent, and
// pass it to Register in Options.Events. Every kind shardcast.EventKinds
// lists is observed from the first collection on, at 0.
//
// It is shardcast.EventCounter, which the Prometheus collector counts
// with too. The zero value is ready to use; it must not be copied after
// first use.
type Events = shardcast.EventCounter
