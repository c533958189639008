// Package hot finds a broker's hot channels: it samples published and
// received messages into per-node top-K sketches, one window at a time,
// and raises EventHotChannel for a channel carrying more than
// Options.HotShare of a node's traffic.
package hot
