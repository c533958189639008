package shardcast

import (
	"errors"

	"github.com/shardcast/shardcast/internal/badconfig"
	"github.com/shardcast/shardcast/internal/notsent"
)

// Sentinel errors callers can branch on with errors.Is. Engines wrap them
// with context; they never return them bare from a failed Redis call.
var (
	// ErrClosed is returned by any call made after Close.
	ErrClosed = errors.New("shardcast: broker closed")
	// ErrInvalidChannel is returned for an empty channel name.
	ErrInvalidChannel = errors.New("shardcast: invalid channel")
	// ErrPayloadTooLarge is returned when a payload exceeds Options.MaxPayload.
	ErrPayloadTooLarge = errors.New("shardcast: payload too large")
	// ErrNoHandler is returned by Subscribe on a broker built without a
	// Handler: such a broker can only publish.
	ErrNoHandler = errors.New("shardcast: subscribe needs Options.Handler; this broker is publish-only")
	// ErrInvalidConfig wraps every configuration error returned by a
	// constructor.
	ErrInvalidConfig = badconfig.Err
	// ErrNotSent is wrapped by a Publish error when the message certainly
	// never reached Redis: the connection was closed, down or already
	// failed, or its backlog was full. Resending such a message cannot
	// deliver it twice. A Publish error without it (a timeout, a connection
	// lost while the reply was due) leaves unknown whether Redis ran the
	// command. An engine may resend unsent messages itself before it
	// returns; the cluster engine does, to the master its refreshed slot
	// map names.
	ErrNotSent = notsent.Err
	// ErrLayoutMismatch is wrapped by the error a constructor returns when
	// the layout record of the application's running brokers holds another
	// layout than the broker's (see Agreement), and by the Err of the
	// EventError a running broker raises when it finds the record replaced by
	// another layout.
	ErrLayoutMismatch = errors.New("shardcast: layout differs from the running brokers' layout record")
	// ErrWrongEngine wraps the error a constructor returns when the
	// server it reaches is not the kind its engine drives: sharded.New
	// on a Redis Cluster node (whose classic PUBLISH every node of the
	// cluster would relay, the cost the cluster engine exists to avoid),
	// or cluster.New on a standalone instance. The message names the
	// constructor to use instead. It is checked once, at New, where the
	// server answers the question (INFO, CLUSTER SLOTS); a user not
	// allowed to ask is not checked.
	ErrWrongEngine = errors.New("shardcast: wrong engine for this server")
	// ErrBadTopology wraps every error cluster.ParseSlots returns: a reply
	// of the wrong shape, a Redis error inside the reply, an out-of-range or
	// overlapping slot range, or a node whose address cannot be worked out. A
	// Redis error found in the reply stays reachable through errors.Is/As as
	// well.
	ErrBadTopology = errors.New("shardcast: bad cluster topology")

	// Errors of an online re-layout (sharded.Relayout, cluster.Relayout):

	// ErrRelayoutInProgress is returned when a re-layout to another
	// layout is already under way for the application.
	ErrRelayoutInProgress = errors.New("shardcast: another re-layout is in progress")
	// ErrSameLayout is returned for a re-layout to the layout the record
	// already holds.
	ErrSameLayout = errors.New("shardcast: the new layout is the current one")
	// ErrRelayoutAborted is returned by a re-layout that was aborted (by
	// the caller, or because its context ended before the finish).
	ErrRelayoutAborted = errors.New("shardcast: re-layout aborted")
	// ErrRelayoutVanished is returned by a re-layout whose transition
	// disappeared from the control instance under its coordinator (the
	// instance lost its data, or another process's AbortRelayout ended
	// it between two of the coordinator's polls): the brokers follow the
	// record they find
	// (docs/RELAYOUT.md, "Failure cases"); check it before running again.
	ErrRelayoutVanished = errors.New("shardcast: the re-layout's transition vanished from the control instance")
	// ErrNoRelayout is returned by an abort when no re-layout is under
	// way for the application (it finished, was aborted, or never
	// began).
	ErrNoRelayout = errors.New("shardcast: no re-layout under way")
	// ErrNoLayoutRecord is returned when there is no layout record to
	// move from: no broker of the application ever ran with the
	// agreement on.
	ErrNoLayoutRecord = errors.New("shardcast: no layout record")
)

// Causes carried in Event.Err, for applications that tell the reasons of a
// loss apart.
var (
	// ErrSlotMoved is the Err of an EventInterrupted for one partition
	// whose channels Redis unsubscribed on its own (the cluster engine):
	// the partition's hash slot moved to another master, so messages
	// published from Since on may be lost until an EventRestored for the
	// partition follows.
	ErrSlotMoved = errors.New("shardcast: server unsubscribed the partition (slot moved)")
	// ErrPartitionMoved is wrapped by the Err of an EventInterrupted the
	// cluster engine emits when a topology refresh finds partitions owned
	// by another master than the one their subscriptions are on; the
	// message names the old and the new master, and Partitions lists the
	// partitions moved between that pair. An EventRestored follows once
	// the new master confirmed them.
	ErrPartitionMoved = errors.New("shardcast: partitions moved to another master")
	// ErrHandlerPanic is wrapped by the Err of the EventError a WorkerPool
	// emits when the Handler panics; the error also carries the first
	// panic's value and stack.
	ErrHandlerPanic = errors.New("shardcast: handler panicked")
	// ErrSilentPath is wrapped by the Err of an EventInterrupted raised by
	// a delivery probe (ConnOptions.ProbeInterval), whose message names the
	// partition or instance: a probe the broker published through it did
	// not come back on its own subscribe connection within ProbeTimeout,
	// although the connection answers pings.
	// The subscriptions are renewed, and EventRestored follows once a probe
	// returns.
	ErrSilentPath = errors.New("shardcast: delivery probe not received (path silent)")
	// ErrRelayoutOrder is wrapped by the Err of an EventRelayout whose
	// channels' messages may have been delivered out of order at the
	// switch (never lost or twice).
	ErrRelayoutOrder = errors.New("shardcast: re-layout hand-over without its barrier; order at the switch not guaranteed")
)
