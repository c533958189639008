package centrifugebroker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/centrifugal/centrifuge"
	"github.com/centrifugal/protocol"
	"github.com/shardcast/shardcast"
)

// DefaultPresenceTTL is how long a presence entry lives after it was last
// added when PresenceConfig.TTL is zero: 60 seconds, as in Centrifuge's
// Redis presence manager. A node re-adds its clients' entries every
// centrifuge.Config.ClientPresenceUpdateInterval (default 25 s).
const DefaultPresenceTTL = 60 * time.Second

// PresenceConfig configures a PresenceManager. A zero field means its
// default.
type PresenceConfig struct {
	// TTL is how long a client's entry stays after it was last added
	// (default DefaultPresenceTTL): the entries of a node that died
	// without removing them disappear that long after its last update.
	// Keep it well above the node's ClientPresenceUpdateInterval.
	// Expiry is judged by the Redis server's clock, to the millisecond;
	// a node whose clock runs behind the server's by d may read an
	// entry up to d after it expired (reads ask the server's clock only
	// once the node's says an entry may be due).
	TTL time.Duration
	// UserMapping, when it returns true for a channel, makes the channel's
	// presence also count its clients per user, so that PresenceStats
	// reads the number of unique users from Redis in one step instead of
	// loading every entry. It costs two more hashes per channel. The
	// choice is made on each call, so it must not change for a channel:
	// entries added without it are counted only once re-added with it,
	// and until then PresenceStats misses their users. Nil maps no
	// channel.
	UserMapping func(channel string) bool
	// FieldTTL gives each entry its own expiry on its hash field
	// (HPEXPIRE: Redis 7.4+, Valkey 9+) instead of a sorted set of expiry
	// times that the scripts sweep: the server drops expired entries
	// itself, and reads write nothing, which lets them run on replicas
	// (ReadFromReplicas). The price, as with Centrifuge's UseHashFieldTTL:
	// with user mapping, an entry that expired (instead of being removed)
	// stays counted for its user, so PresenceStats can count a user whose
	// clients all left until the TTL after its last add. On a server
	// without per-field expiry every add fails with an error wrapping
	// ErrNotSupported. The choice must not change while a channel has
	// entries.
	FieldTTL bool
	// ReadFromReplicas makes Presence and PresenceStats run on the node
	// the engine subscribes the channel on (the engines' EvalRO): a
	// replica where the engine places subscriptions on replicas
	// (cluster.Config.SubscribeOn Replicas or AllNodes,
	// sharded.Config.SubscribeOn Replicas over Sentinel shards), which
	// then serves those reads instead of the master; the master
	// otherwise, and whenever the replica cannot answer. A replica
	// answers from what it has replicated so far, so a read may miss the
	// last moment's adds and removes. It needs FieldTTL.
	ReadFromReplicas bool
}

// PresenceManager is a centrifuge.PresenceManager that keeps channels'
// presence in Redis, beside the channels, through a Broker's shardcast
// engine: on the sharded engine on the channel's instance, on the cluster
// engine in the channel's partition slot, with its history. Each call runs
// one Lua script on the channel's node, bounded by the Broker's
// Config.CallTimeout; calls fail while that node is unreachable. It is
// safe for concurrent use.
//
// After an online re-layout the calls follow a moving channel to its new
// slot, as history's do. The entries under its old tag are not moved but
// expire, and its presence fills again as nodes re-add their clients
// (every centrifuge.Config.ClientPresenceUpdateInterval).
//
// It has no Close: it uses the Broker's connections, which the Broker's
// Close (node.Shutdown) closes; calls after that fail with an error
// wrapping shardcast.ErrClosed.
type PresenceManager struct {
	b       *Broker
	engine  scripter // nil if the engine cannot run scripts
	ttl     time.Duration
	mapping func(channel string) bool
	// fieldTTL is PresenceConfig.FieldTTL; reader runs the reads: the
	// engine's EvalRO with ReadFromReplicas, its Eval otherwise.
	fieldTTL bool
	reader   evalFunc
}

// evalFunc is an engine's Eval or EvalRO.
type evalFunc func(ctx context.Context, channel string, s *shardcast.Script, keys []string, args ...string) (any, error)

// replicaReader is an engine that runs read-only scripts where it
// subscribes (both engines' EvalRO).
type replicaReader interface {
	EvalRO(ctx context.Context, channel string, s *shardcast.Script, keys []string, args ...string) (any, error)
}

var _ centrifuge.PresenceManager = (*PresenceManager)(nil)

// NewPresenceManager returns the presence manager of b's engine; pass it
// to node.SetPresenceManager before node.Run. It fails, with an error
// wrapping shardcast.ErrInvalidConfig, if b is nil, cfg.TTL negative, or
// cfg.ReadFromReplicas set without cfg.FieldTTL; and with an error
// wrapping ErrNotSupported for ReadFromReplicas on an engine that cannot
// read on replicas.
//
//	b, err := centrifugebroker.New(node, cfg)
//	...
//	node.SetBroker(b)
//	pm, err := centrifugebroker.NewPresenceManager(b, centrifugebroker.PresenceConfig{})
//	...
//	node.SetPresenceManager(pm)
func NewPresenceManager(b *Broker, cfg PresenceConfig) (*PresenceManager, error) {
	switch {
	case b == nil:
		return nil, fmt.Errorf("%w: centrifugebroker: nil Broker", shardcast.ErrInvalidConfig)
	case cfg.TTL < 0:
		return nil, fmt.Errorf("%w: centrifugebroker: PresenceConfig.TTL = %v, want >= 0", shardcast.ErrInvalidConfig, cfg.TTL)
	case cfg.ReadFromReplicas && !cfg.FieldTTL:
		return nil, fmt.Errorf("%w: centrifugebroker: PresenceConfig.ReadFromReplicas needs FieldTTL: without it reads remove expired entries, which a replica cannot", shardcast.ErrInvalidConfig)
	}
	m := &PresenceManager{b: b, ttl: cfg.TTL, mapping: cfg.UserMapping, fieldTTL: cfg.FieldTTL}
	if m.ttl == 0 {
		m.ttl = DefaultPresenceTTL
	}
	m.engine, _ = b.engine.(scripter)
	if m.engine != nil {
		m.reader = m.engine.Eval
	}
	if cfg.ReadFromReplicas {
		r, ok := b.engine.(replicaReader)
		if !ok {
			return nil, fmt.Errorf("%w: PresenceConfig.ReadFromReplicas: the engine has no EvalRO", ErrNotSupported)
		}
		m.reader = r.EvalRO
	}
	return m, nil
}

// mapped reports whether ch counts its clients per user.
func (m *PresenceManager) mapped(ch string) bool { return m.mapping != nil && m.mapping(ch) }

// AddPresence sets the entry of client clientID in ch to info and starts
// its TTL over. With user mapping it also counts the client for
// info.UserID.
func (m *PresenceManager) AddPresence(ch, clientID string, info *centrifuge.ClientInfo) error {
	if info == nil {
		return fmt.Errorf("centrifugebroker: add presence: nil ClientInfo for client %q", clientID)
	}
	a := m.args(ch)
	defer a.release()
	a.add(clientID)
	p := infoToProto(info)
	p.Client = clientID // Presence keys the entry by what it decodes
	n, size := len(a.buf), p.SizeCF()
	a.buf = slices.Grow(a.buf, size)[:n+size]
	if _, err := p.MarshalToSizedBufferCF(a.buf[n:]); err != nil {
		return fmt.Errorf("centrifugebroker: add presence: encode ClientInfo: %w", err)
	}
	a.end()
	a.add(info.UserID)
	a.addMillis(m.ttl)
	if m.mapped(ch) {
		a.add("1")
	} else {
		a.add("0")
	}
	if m.fieldTTL {
		_, err := m.run(ch, "add presence", addFieldPresenceScript, a)
		if isUnknownCommand(err) {
			return fmt.Errorf("%w: PresenceConfig.FieldTTL needs per-field expiry (HPEXPIRE: Redis 7.4+, Valkey 9+): %w", ErrNotSupported, err)
		}
		return err
	}
	_, err := m.run(ch, "add presence", addPresenceScript, a)
	return err
}

// isUnknownCommand reports whether err is a script's error for a command
// the server does not have.
func isUnknownCommand(err error) bool {
	if err == nil {
		return false
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "unknown") && strings.Contains(msg, "command")
}

// RemovePresence removes the entry of client clientID from ch, and
// uncounts it from its user. userID is not needed: the client's user is
// known from its entry.
func (m *PresenceManager) RemovePresence(ch, clientID, _ string) error {
	a := m.args(ch)
	defer a.release()
	a.add(clientID)
	_, err := m.run(ch, "remove presence", removePresenceScript, a)
	return err
}

// Presence returns the clients present in ch, by client ID, after
// removing the entries whose TTL ran out (with FieldTTL the server
// removes them).
func (m *PresenceManager) Presence(ch string) (map[string]*centrifuge.ClientInfo, error) {
	a := m.args(ch)
	defer a.release()
	var v any
	var err error
	if m.fieldTTL {
		v, err = m.read(ch, "presence", presenceFieldScript, a)
	} else {
		a.addUint(uint64(time.Now().UnixMilli()))
		v, err = m.run(ch, "presence", presenceScript, a)
	}
	if err != nil {
		return nil, err
	}
	r, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: presence of %q", errBadPresenceReply, ch)
	}
	out := make(map[string]*centrifuge.ClientInfo, len(r))
	for _, e := range r {
		data, ok := e.(string)
		if !ok {
			return nil, fmt.Errorf("%w: presence of %q", errBadPresenceReply, ch)
		}
		var p protocol.ClientInfo
		// UnmarshalCF copies what it keeps, so it may read data in place.
		if err := p.UnmarshalCF(unsafe.Slice(unsafe.StringData(data), len(data))); err != nil {
			return nil, fmt.Errorf("centrifugebroker: presence of %q: %w", ch, err)
		}
		out[p.Client] = infoFromProto(&p)
	}
	return out, nil
}

// PresenceStats returns how many clients are present in ch and how many
// unique users they belong to. With user mapping both numbers come from
// Redis in one step; without, it counts the entries Presence returns.
func (m *PresenceManager) PresenceStats(ch string) (centrifuge.PresenceStats, error) {
	if !m.mapped(ch) {
		clients, err := m.Presence(ch)
		if err != nil {
			return centrifuge.PresenceStats{}, err
		}
		users := make(map[string]struct{}, len(clients))
		for _, info := range clients {
			users[info.UserID] = struct{}{}
		}
		return centrifuge.PresenceStats{NumClients: len(clients), NumUsers: len(users)}, nil
	}
	a := m.args(ch)
	defer a.release()
	var v any
	var err error
	if m.fieldTTL {
		v, err = m.read(ch, "presence stats", presenceStatsFieldScript, a)
	} else {
		a.addUint(uint64(time.Now().UnixMilli()))
		v, err = m.run(ch, "presence stats", presenceStatsScript, a)
	}
	if err != nil {
		return centrifuge.PresenceStats{}, err
	}
	r, ok := v.([]any)
	if !ok || len(r) != 2 {
		return centrifuge.PresenceStats{}, fmt.Errorf("%w: presence stats of %q", errBadPresenceReply, ch)
	}
	clients, ok1 := r[0].(int64)
	users, ok2 := r[1].(int64)
	if !ok1 || !ok2 {
		return centrifuge.PresenceStats{}, fmt.Errorf("%w: presence stats of %q", errBadPresenceReply, ch)
	}
	return centrifuge.PresenceStats{NumClients: int(clients), NumUsers: int(users)}, nil
}

// errBadPresenceReply reports a presence script reply of the wrong shape:
// a foreign script under the same SHA, or keys another writer used.
var errBadPresenceReply = errors.New("centrifugebroker: unexpected reply from a presence script")

// presenceKeys is how many keys every presence script gets.
const presenceKeys = 4

// args starts the keys and arguments of a script call on ch with ch's
// clients, expiry, user_of and users keys (see presencescripts.go); the
// caller adds the arguments and releases it.
func (m *PresenceManager) args(ch string) *scriptArgs {
	a := getScriptArgs()
	ks := m.b.keys
	p := ks.place(ch)
	ks.addKey(a, p, "presence.clients.", ch)
	ks.addKey(a, p, "presence.expiry.", ch)
	ks.addKey(a, p, "presence.user_of.", ch)
	ks.addKey(a, p, "presence.users.", ch)
	return a
}

// keys returns the presence keys of ch.
func (m *PresenceManager) keys(ch string) []string {
	a := m.args(ch)
	defer a.release()
	return slices.Clone(a.strings()) // a's slice goes back to the pool
}

// run runs s on the node of ch with the keys and arguments built in a
// (see args), bounded by the Broker's CallTimeout; op names the call in
// errors.
func (m *PresenceManager) run(ch, op string, s *shardcast.Script, a *scriptArgs) (any, error) {
	if m.engine == nil {
		return nil, fmt.Errorf("%w: presence: the engine cannot run scripts", ErrNotSupported)
	}
	return m.call(ch, op, m.engine.Eval, s, a)
}

// read is run for a script that writes nothing: on a replica with
// ReadFromReplicas.
func (m *PresenceManager) read(ch, op string, s *shardcast.Script, a *scriptArgs) (any, error) {
	if m.reader == nil {
		return nil, fmt.Errorf("%w: presence: the engine cannot run scripts", ErrNotSupported)
	}
	return m.call(ch, op, m.reader, s, a)
}

// call runs s with eval, as run says.
func (m *PresenceManager) call(ch, op string, eval evalFunc, s *shardcast.Script, a *scriptArgs) (any, error) {
	if err := m.b.checkChannels(ch); err != nil {
		return nil, err
	}
	ctx, cancel := m.b.callCtx()
	defer cancel()
	all := a.strings()
	v, err := eval(ctx, ch, s, all[:presenceKeys], all[presenceKeys:]...)
	if err != nil {
		return nil, fmt.Errorf("centrifugebroker: %s: %w", op, err)
	}
	return v, nil
}
