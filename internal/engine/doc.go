// Package engine is the kit both broker engines are built on, so that what
// they have in common is written once:
//
//   - Core: the subscribe machine — paths (a cluster partition, or one
//     subscribe connection of a sharded instance) with their wanted
//     channels, Subscribe/Unsubscribe with claim tokens and undo (grouped
//     by a Routing hook while a re-layout runs), resubscribe after a loss
//     (Sync), Interrupted/Restored events, the maintenance loop that heals
//     interrupted paths, Stats and Close;
//   - Link: one supervised subscribe connection to one node — dial with
//     AUTH/TLS, reconnect backoff, asynchronous health pings, loss reports;
//   - Publisher: Publish, PublishAsync and Eval, pinned to a re-layout's
//     view while a channel moves, and Core.Resend, the resend loop for
//     messages certainly not sent;
//   - Inbox, Frame, Turn, Background: the inbound path to the worker pool,
//     pooled outbound envelopes, per-path command order, and work that
//     outlives its caller.
//
// An engine supplies a Router (where a channel's path is, which link
// carries a path now) and a PublishRoute (where a channel's messages go),
// and keeps only what differs: the sharded engine maps a channel to an
// instance; the cluster engine owns the topology, the slot map and moves.
package engine
