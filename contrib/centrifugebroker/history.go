package centrifugebroker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/centrifugal/centrifuge"
	"github.com/centrifugal/protocol"
	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/envelope"
)

// DefaultIdempotentResultTTL is how long the result of a publish with an
// IdempotencyKey is remembered when PublishOptions.IdempotentResultTTL is
// zero: 5 minutes, as in Centrifuge's brokers.
const DefaultIdempotentResultTTL = 5 * time.Minute

// scripter is what both shardcast engines offer to run a script on the
// node that carries a channel.
type scripter interface {
	Eval(ctx context.Context, channel string, s *shardcast.Script, keys []string, args ...string) (any, error)
	WireChannel(channel string) string
}

// history keeps channels' history and idempotent publish results in Redis,
// beside the channels (see keyspace), through the engine's Eval.
type history struct {
	*keyspace
	engine scripter
	// publish is the command a script publishes with.
	publish string
	// raw: publish frames without a shardcast envelope.
	raw bool
	// metaTTL is the node's Config.HistoryMetaTTL.
	metaTTL time.Duration
	// strict is "1" with Config.NewEpochOnServerChange, "0" without.
	strict string
}

// newHistory returns the history of engine's channels, whose keys ks
// names; an engine that cannot run scripts gets one whose calls fail with
// ErrNotSupported.
func newHistory(engine shardcast.Broker, ks *keyspace, raw bool, metaTTL time.Duration, strict bool) *history {
	h := &history{keyspace: ks, raw: raw, metaTTL: metaTTL, publish: "publish", strict: "0"}
	if strict {
		h.strict = "1"
	}
	h.engine, _ = engine.(scripter)
	if ks.cluster != nil {
		h.publish = "spublish"
	}
	return h
}

// addKeys adds the stream and meta keys of ch, at place, and for an
// idempotencyKey its result key. The result key spells the lengths out so
// that no two (channel, key) pairs share one.
func (h *history) addKeys(a *scriptArgs, p string, ch, idempotencyKey string) {
	h.addKey(a, p, "history.stream.", ch)
	h.addKey(a, p, "history.meta.", ch)
	if idempotencyKey != "" {
		h.addKey(a, p, "result.", strconv.Itoa(len(ch)), ".", ch, ".", idempotencyKey)
	}
}

// keys returns the stream, meta and, for idempotencyKey, result keys of ch.
func (h *history) keys(ch, idempotencyKey string) []string {
	a := getScriptArgs()
	defer a.release()
	h.addKeys(a, h.place(ch), ch, idempotencyKey)
	return slices.Clone(a.strings()) // a's slice goes back to the pool
}

// addWire adds the wire channel of ch, at place: what the engine's
// WireChannel returns, built without hashing ch again on a cluster.
func (h *history) addWire(a *scriptArgs, place string, ch string) {
	if h.cluster != nil {
		a.add(place, ch)
		return
	}
	a.add(h.engine.WireChannel(ch))
}

// addEpoch adds an epoch for a stream that has none, or whose meta
// another server wrote (see historyscripts.go): random, so that a
// history that starts over (its meta expired, lost with a restart, or
// written before a failover, restart or slot migration) never gets an
// old epoch back.
func (a *scriptArgs) addEpoch() {
	a.buf = strconv.AppendUint(a.buf, rand.Uint64()>>16, 36)
	a.end()
}

// addMillis adds d for PEXPIRE: at least 1 ms when positive, "0" for none.
func (a *scriptArgs) addMillis(d time.Duration) {
	if d <= 0 {
		a.add("0")
		return
	}
	a.addUint(uint64(max((d+time.Millisecond-1)/time.Millisecond, 1)))
}

// errBadReply reports a script reply of the wrong shape: a foreign script
// under the same SHA, or keys another writer used.
var errBadReply = errors.New("centrifugebroker: unexpected reply from a history script")

// publishScripted runs publishScript for a publish that keeps history or
// has an idempotency key.
func (h *history) publishScripted(ctx context.Context, ch string, data []byte, opts centrifuge.PublishOptions) (centrifuge.PublishResult, error) {
	if h.engine == nil {
		return centrifuge.PublishResult{}, fmt.Errorf("%w: history: the engine cannot run scripts", ErrNotSupported)
	}
	keep := opts.HistorySize > 0 && opts.HistoryTTL > 0
	now := time.Now()
	a := getScriptArgs()
	defer a.release()
	p := h.place(ch)
	h.addKeys(a, p, ch, opts.IdempotencyKey)
	if opts.IdempotencyKey == "" {
		h.addKey(a, p, "history.meta.", ch) // unused: no idempotency
	}
	if !h.raw {
		a.buf = envelope.Append(a.buf, now, nil)
	}
	a.end()
	pub := publicationProto(data, opts)
	if keep {
		// A stream keeps what a History call returns: no map broker
		// fan-out fields, and its own publish time.
		pub = &protocol.Publication{
			Data: data, Info: infoToProto(opts.ClientInfo), Tags: opts.Tags, Key: opts.Key,
			Removed: opts.Removed, Version: opts.Version, Time: now.UnixMilli(),
		}
	}
	var err error
	if a.buf, err = appendProto(a.buf, pub); err != nil {
		return centrifuge.PublishResult{}, err
	}
	a.end()
	h.addWire(a, p, ch)
	a.add(h.publish)
	if keep {
		a.addUint(uint64(opts.HistorySize))
		a.addMillis(opts.HistoryTTL)
		a.addMillis(orDefault(opts.HistoryMetaTTL, h.metaTTL))
	} else {
		a.add("0")
		a.add("0")
		a.add("0")
	}
	a.addEpoch()
	if opts.IdempotencyKey != "" {
		a.addMillis(orDefault(opts.IdempotentResultTTL, DefaultIdempotentResultTTL))
	} else {
		a.add("0")
	}
	if keep && opts.UseDelta {
		a.add("1")
	} else {
		a.add("0")
	}
	if keep {
		a.addUint(opts.Version) // "0": none
	} else {
		a.add("0")
	}
	a.add(opts.VersionEpoch)
	a.add(h.strict)
	all := a.strings()
	v, err := h.engine.Eval(ctx, ch, publishScript, all[:3], all[3:]...)
	if err != nil {
		return centrifuge.PublishResult{}, fmt.Errorf("centrifugebroker: publish: %w", err)
	}
	r, ok := v.([]any)
	if !ok || len(r) != 3 {
		return centrifuge.PublishResult{}, errBadReply
	}
	offset, ok1 := r[0].(int64)
	epoch, ok2 := r[1].(string)
	suppressed, ok3 := r[2].(int64)
	if !ok1 || !ok2 || !ok3 || offset < 0 {
		return centrifuge.PublishResult{}, errBadReply
	}
	res := centrifuge.PublishResult{StreamPosition: centrifuge.StreamPosition{Offset: uint64(offset), Epoch: epoch}}
	switch suppressed {
	case 1:
		res.Suppressed, res.SuppressReason = true, centrifuge.SuppressReasonIdempotency
	case 2:
		res.Suppressed, res.SuppressReason = true, centrifuge.SuppressReasonVersion
	}
	return res, nil
}

// orDefault returns d, or def when d is zero.
func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// read runs historyScript.
func (h *history) read(ctx context.Context, ch string, opts centrifuge.HistoryOptions) ([]*centrifuge.Publication, centrifuge.StreamPosition, error) {
	if h.engine == nil {
		return nil, centrifuge.StreamPosition{}, fmt.Errorf("%w: history: the engine cannot run scripts", ErrNotSupported)
	}
	f := opts.Filter
	withPubs, from, count, reverse := "1", uint64(0), uint64(0), "0"
	if f.Since != nil {
		if f.Reverse {
			from = f.Since.Offset - 1
			if from == 0 || f.Since.Offset == 0 {
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
	if f.Reverse {
		reverse = "1"
	}
	a := getScriptArgs()
	defer a.release()
	h.addKeys(a, h.place(ch), ch, "")
	a.add(withPubs)
	a.addUint(from)
	a.addUint(count)
	a.add(reverse)
	a.addMillis(orDefault(opts.MetaTTL, h.metaTTL))
	a.addEpoch()
	a.add(h.strict)
	all := a.strings()
	v, err := h.engine.Eval(ctx, ch, historyScript, all[:2], all[2:]...)
	if err != nil {
		return nil, centrifuge.StreamPosition{}, fmt.Errorf("centrifugebroker: history: %w", err)
	}
	r, ok := v.([]any)
	if !ok || len(r) < 2 {
		return nil, centrifuge.StreamPosition{}, errBadReply
	}
	top, ok1 := r[0].(string)
	epoch, ok2 := r[1].(string)
	offset, err := strconv.ParseUint(top, 10, 64)
	if !ok1 || !ok2 || err != nil {
		return nil, centrifuge.StreamPosition{}, errBadReply
	}
	sp := centrifuge.StreamPosition{Offset: offset, Epoch: epoch}
	if len(r) < 3 {
		return nil, sp, nil
	}
	entries, ok := r[2].([]any)
	if !ok {
		return nil, sp, errBadReply
	}
	pubs := make([]*centrifuge.Publication, 0, len(entries))
	for _, e := range entries {
		p, err := parseEntry(e)
		if err != nil {
			return nil, sp, err
		}
		pubs = append(pubs, p)
	}
	return pubs, sp, nil
}

// parseEntry turns one XRANGE entry, { "offset-0", { "d", publication } },
// into a Publication.
func parseEntry(e any) (*centrifuge.Publication, error) {
	entry, ok := e.([]any)
	if !ok || len(entry) != 2 {
		return nil, errBadReply
	}
	id, ok1 := entry[0].(string)
	fields, ok2 := entry[1].([]any)
	if !ok1 || !ok2 {
		return nil, errBadReply
	}
	ms, _, _ := strings.Cut(id, "-")
	offset, err := strconv.ParseUint(ms, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%w: stream id %q", errBadReply, id)
	}
	for i := 0; i+1 < len(fields); i += 2 {
		if name, _ := fields[i].(string); name != "d" {
			continue
		}
		data, _ := fields[i+1].(string)
		var p protocol.Publication
		if err := unmarshalPublication([]byte(data), &p); err != nil {
			return nil, fmt.Errorf("centrifugebroker: history entry %s: %w", id, err)
		}
		return pubAt(&p, offset), nil
	}
	return nil, fmt.Errorf("%w: history entry %s without data", errBadReply, id)
}

// remove runs removeHistoryScript.
func (h *history) remove(ctx context.Context, ch string) error {
	if h.engine == nil {
		return fmt.Errorf("%w: history: the engine cannot run scripts", ErrNotSupported)
	}
	if _, err := h.engine.Eval(ctx, ch, removeHistoryScript, h.keys(ch, "")[:1]); err != nil {
		return fmt.Errorf("centrifugebroker: remove history: %w", err)
	}
	return nil
}
