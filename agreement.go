package shardcast

import (
	"fmt"
	"strings"
	"time"
)

// Agreement configures the layout record, which makes the brokers of one
// application route channels the same way. Brokers whose layouts differ
// (instance list, partition count or prefix) would lose the messages
// between them without an error, so at New each broker compares its layout
// with the record in Redis, in one script, and registers with a heartbeat:
// with no record or no live broker it writes its own; with the same layout
// it joins; otherwise New fails with a *LayoutMismatchError, or with Follow
// set adopts the record. Change a running fleet's layout with an online
// re-layout (docs/RELAYOUT.md) or stop it whole first; a crashed broker
// holds the record until its heartbeat expires.
//
// Both engines take it as Config.Agreement; the zero value turns it on.
// It costs two small keys (RecordKey and the registry; docs/LAYOUT.md §9), two
// script calls per Heartbeat and the permission to run scripts. A server
// that refuses the scripts with NOPERM (a user allowed Pub/Sub only) does
// not stop the broker: it runs without the record and logs one Warn; set
// Off to do so on purpose, without the Warn. The sharded engine also
// writes an id into each instance once (an instance key), so that brokers
// reaching the same instances under other names (a host name and its
// address, a TCP proxy) agree. docs/LAYOUT.md, "The layout record", lists
// every key and the permissions each needs.
type Agreement struct {
	// Off turns the layout record off: the broker neither checks nor
	// writes it, and registers nowhere.
	Off bool
	// Follow makes a broker whose configured layout differs from the one
	// live brokers recorded adopt the recorded layout at New instead of
	// failing: the sharded engine takes the record's instance list (an
	// instance its own Addrs name keeps that entry's URL credentials;
	// any other is reached as host:port with Conn's, as a re-layout
	// reaches a new instance), the cluster engine the record's partition
	// count and prefix. The configured layout is then only what the first
	// broker of a fleet writes, and nodes started during or after an
	// online re-layout (Relayout) join on whatever layout the fleet uses
	// without their configuration being edited. New still fails when the
	// record cannot be adopted (it was written by the other engine), and
	// the sharded engine first connects to its configured Addrs, so each
	// of them must answer even when the record replaces the list. New
	// logs, at Info, the layout it adopted; Fingerprint and Layout report
	// it. Follow is a choice of the operator: a node meant to run another
	// layout (a mistaken rollout) silently joins the old one instead of
	// stopping at the error, so leave it off where a mismatch should stop
	// the node.
	Follow bool
	// App names the application, so that applications sharing Redis keep
	// separate records. Brokers with the same App on the same Redis must
	// agree on the layout. It is not derived from the cluster engine's
	// Prefix on purpose: a prefix that differs between nodes is one of the
	// mismatches the record exists to catch. It may not contain '{' or
	// '}'; ending it with a separator (":") keeps the key names readable.
	App string
	// Heartbeat is how often a live broker renews its registration
	// (default 5s; at least 1ms). A broker that stops renewing it is
	// dropped from the registry 3 heartbeats later, after which brokers
	// with another layout may start. Each renewal, like the check at New,
	// is bounded by Conn.CommandTimeout; Close tries to leave the registry
	// for at most one Heartbeat, CommandTimeout or one second, whichever
	// is shortest. A New
	// that failed on a timeout may still have registered, if Redis ran
	// the command late: that registration expires like any other.
	Heartbeat time.Duration
}

// WithDefaults returns a copy of a with every zero field set to its
// default.
func (a Agreement) WithDefaults() Agreement {
	if a.Heartbeat == 0 {
		a.Heartbeat = DefaultHeartbeat
	}
	return a
}

// Validate reports a setting that cannot work, wrapped in ErrInvalidConfig.
func (a Agreement) Validate() error {
	if a.Heartbeat < 0 || (a.Heartbeat > 0 && a.Heartbeat < time.Millisecond) {
		return fmt.Errorf("%w: Agreement.Heartbeat = %v, want 0 (default) or at least 1ms", ErrInvalidConfig, a.Heartbeat)
	}
	if strings.ContainsAny(a.App, "{}") {
		return fmt.Errorf("%w: Agreement.App %q contains a brace", ErrInvalidConfig, a.App)
	}
	return nil
}

// agreementKeyBase is where every key of the layout record starts, after
// Agreement.App: the hash tag of partition 0, which is "7lw" for every
// partition count. On a cluster the keys thus share one slot, so that one
// script can change them together, and that slot is one every layout
// uses. The agreement's other keys and its barrier channel are named in
// internal/layoutkey, after RecordKey.
var agreementKeyBase = "{" + partitionTags[0] + "}:shardcast-layout:"

// RecordKey returns the name of the hash that holds the layout record:
// App + "{7lw}:shardcast-layout:record".
func (a Agreement) RecordKey() string { return a.App + agreementKeyBase + "record" }

// LayoutRecord describes one layout as the layout record holds it.
type LayoutRecord struct {
	// Fingerprint is the engine's layout fingerprint
	// (sharded.Fingerprint, Layout.Fingerprint); two layouts route every
	// channel the same way exactly when their fingerprints are equal.
	Fingerprint string
	// Description is the layout for people, e.g. `cluster: 128
	// partitions, prefix "app:"` or `sharded: 2 instances: a:6379,
	// b:6379`.
	Description string
	// Engine is "sharded" or "cluster".
	Engine string
	// Partitions and Prefix are the cluster engine's layout (zero for the
	// sharded engine).
	Partitions int
	Prefix     string
	// Instances are the sharded engine's instances, as host:port in
	// routing order (nil for the cluster engine). Credentials are never
	// recorded.
	Instances []string
	// InstanceIDs name the sharded engine's instances, in the order of
	// Instances, by the id each holds (docs/LAYOUT.md §9, the instance key), or by
	// "addr:" and the host:port where an instance could not keep one
	// (a replica, a user without the permission). Two instance lists with
	// the same ids route alike whatever names reach them: a broker whose
	// Fingerprint differs from the record's only by such names joins it.
	// Nil for the cluster engine, and in records written before the ids
	// existed.
	InstanceIDs []string
	// Sentinels gives the Sentinels (host:port) of each of Instances that
	// is a master reached through Sentinel, by its entry ("sentinel/name"),
	// so that a broker that does not know the shard (a re-layout adds it,
	// Follow adopts it) can ask for its master. It is not part of the
	// fingerprint: the Sentinels may change without moving a channel. Nil
	// when no instance is one, and in records written before it existed.
	Sentinels map[string][]string
}

// LayoutMismatchError tells which layouts disagree. It wraps
// ErrLayoutMismatch.
type LayoutMismatchError struct {
	// Ours is the broker's layout; Recorded the record's.
	Ours, Recorded LayoutRecord
	// Where names the Redis that holds the record, and Key its key.
	Where, Key string
	// Live counts the other live brokers registered under the record;
	// Brokers names some of them (their registry members).
	Live    int
	Brokers []string
}

func (e *LayoutMismatchError) Error() string {
	var some string
	if len(e.Brokers) > 0 {
		some = " (" + strings.Join(e.Brokers, ", ")
		if len(e.Brokers) < e.Live {
			some += ", ..."
		}
		some += ")"
	}
	return fmt.Sprintf("%v: this broker's layout %s (%s) differs from %s (%s), recorded in %s on %s and used by %d live broker(s)%s; stop them first or change this broker's configuration",
		ErrLayoutMismatch, e.Ours.Fingerprint, e.Ours.Description, e.Recorded.Fingerprint, e.Recorded.Description,
		e.Key, e.Where, e.Live, some)
}

// Unwrap returns ErrLayoutMismatch.
func (e *LayoutMismatchError) Unwrap() error { return ErrLayoutMismatch }
