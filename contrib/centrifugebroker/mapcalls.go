package centrifugebroker

import (
	"context"
	"fmt"
	"strconv"
	"time"
	"unsafe"

	"github.com/centrifugal/centrifuge"
	"github.com/centrifugal/protocol"
	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/envelope"
)

// mapEphemeralGrace is how long an ephemeral channel's state outlives its
// last write beyond KeyTTL: long enough for a sweep to find its expired
// entries and publish their removal, where state that expired whole would
// vanish without one.
const mapEphemeralGrace = time.Minute

// mapCall is one script call on a map channel: its keys and the arguments
// every map script starts with (see mapLua); the caller adds its own.
type mapCall struct {
	m    *MapBroker
	ch   string
	opts centrifuge.MapChannelOptions
	a    *scriptArgs
}

// call starts a script call on map channel ch with options o; the result
// key is that of idempotencyKey, if any. The caller runs it or releases
// c.a.
func (m *MapBroker) call(ch string, o centrifuge.MapChannelOptions, idempotencyKey string) mapCall {
	a := getScriptArgs()
	ks := m.b.keys
	wire := m.wire(ch)
	p := ks.place(wire)
	ks.addKey(a, p, "map.meta.", ch)
	ks.addKey(a, p, "map.stream.", ch)
	ks.addKey(a, p, "map.state.", ch)
	ks.addKey(a, p, "map.expiry.", ch)
	ks.addKey(a, p, "map.versions.", ch)
	if idempotencyKey != "" {
		ks.addKey(a, p, "map.result.", strconv.Itoa(len(ch)), ".", ch, ".", idempotencyKey)
	} else {
		ks.addKey(a, p, "map.meta.", ch) // unused
	}
	if !m.b.history.raw {
		a.buf = envelope.Append(a.buf, time.Now(), nil)
	}
	a.end()
	m.b.history.addWire(a, p, wire)
	a.add(m.b.history.publish)
	if o.Mode.HasStream() {
		a.add("1")
	} else {
		a.add("0")
	}
	a.addUint(uint64(max(o.StreamSize, 0)))
	a.addMillis(o.StreamTTL)
	if o.Mode.IsEphemeral() && o.KeyTTL > 0 {
		a.addMillis(o.KeyTTL + mapEphemeralGrace)
	} else {
		a.addMillis(o.MetaTTL)
	}
	a.addEpoch()
	return mapCall{m: m, ch: ch, opts: o, a: a}
}

// run runs s and releases the call's arguments; op names the call in
// errors.
func (c mapCall) run(ctx context.Context, op string, s *shardcast.Script) ([]any, error) {
	defer c.a.release()
	c.a.add(c.m.b.history.strict) // the engine adds the run_id after it
	all := c.a.strings()
	v, err := c.m.engine.Eval(ctx, c.m.wire(c.ch), s, all[:mapKeys], all[mapKeys:]...)
	if err != nil {
		return nil, fmt.Errorf("centrifugebroker: map %s on %q: %w", op, c.ch, err)
	}
	r, ok := v.([]any)
	if !ok || len(r) < 2 {
		return nil, fmt.Errorf("%w: %s on %q", errBadMapReply, op, c.ch)
	}
	return r, nil
}

// position reads the { top offset, epoch } a map script replies first.
func position(r []any) (centrifuge.StreamPosition, bool) {
	top, ok1 := r[0].(int64)
	epoch, ok2 := r[1].(string)
	if !ok1 || !ok2 || top < 0 {
		return centrifuge.StreamPosition{}, false
	}
	return centrifuge.StreamPosition{Offset: uint64(top), Epoch: epoch}, true
}

// Publish sets key of map channel ch to opts.Data (without a key, only
// publishes it), appends the publication to the channel's stream and
// publishes it to the channel's subscribers on every node, in one script,
// unless a condition suppresses it: an earlier call with the same
// IdempotencyKey, an equal or newer Version of the key (within its
// VersionEpoch), KeyMode, or a key whose position is not ExpectedPosition.
// The result then says why, and for a position mismatch carries the
// key's current entry. ExpectedPosition and Version need a stream-backed
// channel, Version a key.
func (m *MapBroker) Publish(ctx context.Context, ch string, key string, opts centrifuge.MapPublishOptions) (centrifuge.MapUpdateResult, error) {
	o, err := m.channelOptions(ch)
	if err != nil {
		return centrifuge.MapUpdateResult{}, err
	}
	switch {
	case o.Mode.IsEphemeral() && opts.ExpectedPosition != nil:
		return centrifuge.MapUpdateResult{}, fmt.Errorf("%w: ExpectedPosition needs a recoverable or persistent channel", errMapRequest)
	case o.Mode.IsEphemeral() && opts.Version > 0:
		return centrifuge.MapUpdateResult{}, fmt.Errorf("%w: Version needs a recoverable or persistent channel", errMapRequest)
	case key == "" && opts.Version > 0:
		return centrifuge.MapUpdateResult{}, fmt.Errorf("%w: Version needs a key", errMapRequest)
	case key == "" && opts.ExpectedPosition != nil:
		return centrifuge.MapUpdateResult{}, fmt.Errorf("%w: ExpectedPosition needs a key", errMapRequest)
	case opts.KeyMode != centrifuge.KeyModeReplace && opts.KeyMode != centrifuge.KeyModeIfNew && opts.KeyMode != centrifuge.KeyModeIfExists:
		return centrifuge.MapUpdateResult{}, fmt.Errorf("%w: unknown KeyMode %q", errMapRequest, opts.KeyMode)
	}
	c := m.call(ch, o, opts.IdempotencyKey)
	a := c.a
	a.add(key)
	pub := &protocol.Publication{Data: opts.Data, Info: infoToProto(opts.ClientInfo), Tags: opts.Tags,
		Time: time.Now().UnixMilli(), Key: key}
	if a.buf, err = appendProto(a.buf, pub); err != nil {
		a.release()
		return centrifuge.MapUpdateResult{}, err
	}
	a.end()
	// The entry's removal, published if it is removed without tags of
	// its own or expires.
	if a.buf, err = appendProto(a.buf, &protocol.Publication{Key: key, Removed: true, Tags: opts.Tags}); err != nil {
		a.release()
		return centrifuge.MapUpdateResult{}, err
	}
	a.end()
	a.add("0")
	a.addMillis(o.KeyTTL)
	m.addResultTTL(a, opts.IdempotencyKey, opts.IdempotentResultTTL)
	a.add(string(opts.KeyMode))
	a.add(flag(opts.RefreshTTLOnSuppress))
	a.addUint(opts.Version)
	a.add(opts.VersionEpoch)
	m.addExpected(a, opts.ExpectedPosition)
	a.add(flag(opts.UseDelta))
	return m.update(ctx, c, "publish")
}

// Remove removes key from map channel ch and publishes its removal (with
// opts.Tags, or without them the removed entry's tags), appending it to
// the channel's stream, unless suppressed: an earlier call with the same
// IdempotencyKey, a key not there, or at another position than
// ExpectedPosition.
func (m *MapBroker) Remove(ctx context.Context, ch string, key string, opts centrifuge.MapRemoveOptions) (centrifuge.MapUpdateResult, error) {
	o, err := m.channelOptions(ch)
	if err != nil {
		return centrifuge.MapUpdateResult{}, err
	}
	switch {
	case key == "":
		return centrifuge.MapUpdateResult{}, fmt.Errorf("%w: Remove needs a key", errMapRequest)
	case o.Mode.IsEphemeral() && opts.ExpectedPosition != nil:
		return centrifuge.MapUpdateResult{}, fmt.Errorf("%w: ExpectedPosition needs a recoverable or persistent channel", errMapRequest)
	}
	c := m.call(ch, o, opts.IdempotencyKey)
	a := c.a
	a.add(key)
	if opts.Tags != nil {
		pub := &protocol.Publication{Key: key, Removed: true, Tags: opts.Tags, Time: time.Now().UnixMilli()}
		if a.buf, err = appendProto(a.buf, pub); err != nil {
			a.release()
			return centrifuge.MapUpdateResult{}, err
		}
	}
	a.end() // empty without tags: the entry's own removal
	a.add("")
	a.add("1")
	a.add("0")
	m.addResultTTL(a, opts.IdempotencyKey, opts.IdempotentResultTTL)
	a.add("")  // key mode
	a.add("0") // refresh
	a.add("0") // version
	a.add("")  // version epoch
	m.addExpected(a, opts.ExpectedPosition)
	a.add("0") // delta
	return m.update(ctx, c, "remove")
}

// addResultTTL adds the result TTL of an idempotent call ("0": none).
func (m *MapBroker) addResultTTL(a *scriptArgs, idempotencyKey string, ttl time.Duration) {
	if idempotencyKey == "" {
		a.add("0")
		return
	}
	a.addMillis(orDefault(ttl, m.resultTTL))
}

// addExpected adds the expected offset and epoch of a CAS ("": none).
func (m *MapBroker) addExpected(a *scriptArgs, sp *centrifuge.StreamPosition) {
	if sp == nil {
		a.add("")
		a.add("")
		return
	}
	a.addUint(sp.Offset)
	a.add(sp.Epoch)
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// update runs mapPublishScript and reads its reply.
func (m *MapBroker) update(ctx context.Context, c mapCall, op string) (centrifuge.MapUpdateResult, error) {
	r, err := c.run(ctx, op, mapPublishScript)
	if err != nil {
		return centrifuge.MapUpdateResult{}, err
	}
	sp, ok := position(r)
	if !ok || len(r) != 4 {
		return centrifuge.MapUpdateResult{}, fmt.Errorf("%w: %s on %q", errBadMapReply, op, c.ch)
	}
	reason, ok1 := r[2].(string)
	current, ok2 := r[3].(string)
	if !ok1 || !ok2 {
		return centrifuge.MapUpdateResult{}, fmt.Errorf("%w: %s on %q", errBadMapReply, op, c.ch)
	}
	res := centrifuge.MapUpdateResult{Position: sp}
	if reason == "" {
		return res, nil
	}
	res.Suppressed, res.SuppressReason = true, centrifuge.SuppressReason(reason)
	if res.SuppressReason == centrifuge.SuppressReasonPositionMismatch && current != "" {
		var p protocol.Publication
		offset, err := parseStateEntry(current, &p)
		if err != nil {
			return res, fmt.Errorf("centrifugebroker: map %s on %q: current entry: %w", op, c.ch, err)
		}
		res.CurrentEntry = &centrifuge.MapCurrentEntry{Offset: offset, Data: p.Data}
	}
	return res, nil
}

// parseStateEntry parses an entry of a map channel's state hash (see
// mapscripts.go), offset ':' len ':' removal publication, publication: it
// returns the offset and fills p, which the caller provides so that a
// read of many entries keeps each one's Publication off the heap (pubAt
// copies what it needs). p.Data shares v's bytes, not copied: v must be
// a string of a script's reply, which nothing else holds, so p's Data
// owns them.
func parseStateEntry(v string, p *protocol.Publication) (offset uint64, err error) {
	offset, rest, ok := cutDecimal(unsafe.Slice(unsafe.StringData(v), len(v)))
	if !ok {
		return 0, errBadMapReply
	}
	n, rest, ok := cutDecimal(rest)
	if !ok || n > uint64(len(rest)) {
		return 0, errBadMapReply
	}
	if err := unmarshalPublication(rest[n:], p); err != nil {
		return 0, err
	}
	return offset, nil
}

// ReadState returns the entries of map channel ch (each a Publication
// with its Key and the Offset it was written at) and the channel's stream
// position, read atomically. opts.Key reads one key; otherwise Limit
// pages (0: only the position, -1: every entry; a positive Limit is a
// hint, as with Centrifuge's Redis map broker: Redis may return more, and
// an entry written during a scan may come twice) from Cursor, and the
// result's Cursor is "" after the last page. With opts.Revision of
// another epoch, or past the stream's top, it fails with
// centrifuge.ErrorUnrecoverablePosition.
func (m *MapBroker) ReadState(ctx context.Context, ch string, opts centrifuge.MapReadStateOptions) (centrifuge.MapStateResult, error) {
	o, err := m.channelOptions(ch)
	if err != nil {
		return centrifuge.MapStateResult{}, err
	}
	c := m.call(ch, o, "")
	c.a.add(opts.Key)
	cursor := opts.Cursor
	if cursor == "" {
		cursor = "0"
	}
	c.a.add(cursor)
	switch {
	case opts.Key != "":
		c.a.add("0")
	case opts.Limit < 0:
		c.a.add("-1")
	default:
		c.a.addUint(uint64(opts.Limit))
	}
	r, err := c.run(ctx, "read state", mapReadStateScript)
	if err != nil {
		return centrifuge.MapStateResult{}, err
	}
	sp, ok := position(r)
	var next string
	var kv []any
	if ok && len(r) == 4 {
		next, ok = r[2].(string)
		if ok {
			kv, ok = r[3].([]any)
		}
	}
	if !ok || len(r) != 4 || len(kv)%2 != 0 {
		return centrifuge.MapStateResult{}, fmt.Errorf("%w: read state on %q", errBadMapReply, ch)
	}
	res := centrifuge.MapStateResult{Position: sp}
	if next != "0" {
		res.Cursor = next
	}
	if opts.Revision != nil && (opts.Revision.Epoch != sp.Epoch || opts.Revision.Offset > sp.Offset) {
		return res, centrifuge.ErrorUnrecoverablePosition // another epoch, or past the top: see ReadStream
	}
	if n := len(kv) / 2; n > 0 {
		res.Publications = make([]*centrifuge.Publication, 0, n)
	}
	for i := 0; i < len(kv); i += 2 {
		key, ok1 := kv[i].(string)
		v, ok2 := kv[i+1].(string)
		if !ok1 || !ok2 {
			return centrifuge.MapStateResult{}, fmt.Errorf("%w: read state on %q", errBadMapReply, ch)
		}
		var p protocol.Publication
		offset, err := parseStateEntry(v, &p)
		if err != nil {
			return centrifuge.MapStateResult{}, fmt.Errorf("centrifugebroker: map read state on %q: key %q: %w", ch, key, err)
		}
		pub := pubAt(&p, offset)
		pub.Key = key
		res.Publications = append(res.Publications, pub)
	}
	return res, nil
}

// ReadStream returns the publications kept in map channel ch's stream
// that opts.Filter selects (Since: those after that position, or before
// it in Reverse; Limit: at most that many, 0 for none, -1 for all) and
// the stream's current position. A Since of another epoch, or past the
// stream's top (its writes lost with a failover or a restart), fails with
// centrifuge.ErrorUnrecoverablePosition. An ephemeral channel has no
// stream: no publications, position zero.
func (m *MapBroker) ReadStream(ctx context.Context, ch string, opts centrifuge.MapReadStreamOptions) (centrifuge.MapStreamResult, error) {
	o, err := m.channelOptions(ch)
	if err != nil {
		return centrifuge.MapStreamResult{}, err
	}
	f := opts.Filter
	withPubs, from, count := "1", uint64(0), uint64(0)
	if f.Since != nil {
		if f.Reverse {
			from = f.Since.Offset - 1
			if f.Since.Offset <= 1 {
				withPubs = "0" // nothing precedes offset 1
			}
		} else if from = f.Since.Offset + 1; from == 0 {
			withPubs = "0" // nothing follows the largest offset
		}
	}
	if f.Limit == 0 {
		withPubs = "0"
	} else if f.Limit > 0 {
		count = uint64(f.Limit)
	}
	c := m.call(ch, o, "")
	c.a.add(withPubs)
	c.a.addUint(from)
	c.a.addUint(count)
	c.a.add(flag(f.Reverse))
	r, err := c.run(ctx, "read stream", mapReadStreamScript)
	if err != nil {
		return centrifuge.MapStreamResult{}, err
	}
	sp, ok := position(r)
	if !ok {
		return centrifuge.MapStreamResult{}, fmt.Errorf("%w: read stream on %q", errBadMapReply, ch)
	}
	if f.Since != nil && f.Since.Epoch != "" && f.Since.Epoch != sp.Epoch {
		return centrifuge.MapStreamResult{}, centrifuge.ErrorUnrecoverablePosition
	}
	if f.Since != nil && f.Since.Offset > sp.Offset {
		// A position past the top: its publications were lost (a failover
		// or a restart from a snapshot lost the last writes) and their
		// offsets will be given out again. Centrifuge does not check this
		// for map subscriptions, and a client recovering from there would
		// keep the lost writes.
		return centrifuge.MapStreamResult{}, centrifuge.ErrorUnrecoverablePosition
	}
	res := centrifuge.MapStreamResult{Position: sp}
	if len(r) < 3 {
		return res, nil
	}
	entries, ok := r[2].([]any)
	if !ok {
		return centrifuge.MapStreamResult{}, fmt.Errorf("%w: read stream on %q", errBadMapReply, ch)
	}
	res.Publications = make([]*centrifuge.Publication, 0, len(entries))
	for _, e := range entries {
		p, err := parseEntry(e)
		if err != nil {
			return centrifuge.MapStreamResult{}, fmt.Errorf("centrifugebroker: map read stream on %q: %w", ch, err)
		}
		res.Publications = append(res.Publications, p)
	}
	return res, nil
}

// Stats returns how many keys map channel ch holds, after removing the
// expired ones.
func (m *MapBroker) Stats(ctx context.Context, ch string) (centrifuge.MapStats, error) {
	n, _, _, err := m.sweep(ctx, ch, 0)
	return centrifuge.MapStats{NumKeys: n}, err
}

// sweep runs mapStatsScript on ch, removing up to max expired entries
// (0: none), and returns how many keys ch has, how many entries it
// removed and, when max > 0, how long until its next entry expires (-1:
// none).
func (m *MapBroker) sweep(ctx context.Context, ch string, max int) (keys, swept int, next time.Duration, err error) {
	o, err := m.channelOptions(ch)
	if err != nil {
		return 0, 0, 0, err
	}
	c := m.call(ch, o, "")
	c.a.addUint(uint64(max))
	r, err := c.run(ctx, "stats", mapStatsScript)
	if err != nil {
		return 0, 0, 0, err
	}
	if len(r) != 3 {
		return 0, 0, 0, fmt.Errorf("%w: stats on %q", errBadMapReply, ch)
	}
	n, ok1 := r[0].(int64)
	s, ok2 := r[1].(int64)
	ms, ok3 := r[2].(int64)
	if !ok1 || !ok2 || !ok3 {
		return 0, 0, 0, fmt.Errorf("%w: stats on %q", errBadMapReply, ch)
	}
	next = -1
	if ms >= 0 {
		next = time.Duration(ms) * time.Millisecond
	}
	return int(n), int(s), next, nil
}

// Clear deletes map channel ch's state, stream and meta; its next call
// starts a new epoch, so clients holding a position resync. Results of
// idempotent calls are kept until they expire.
func (m *MapBroker) Clear(ctx context.Context, ch string, _ centrifuge.MapClearOptions) error {
	o, err := m.channelOptions(ch)
	if err != nil {
		return err
	}
	c := m.call(ch, o, "")
	defer c.a.release()
	all := c.a.strings()
	if _, err := m.engine.Eval(ctx, m.wire(ch), mapClearScript, all[:mapKeys]); err != nil {
		return fmt.Errorf("centrifugebroker: map clear on %q: %w", ch, err)
	}
	return nil
}
