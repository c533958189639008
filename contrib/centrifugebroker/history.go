package centrifugebroker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/centrifugal/centrifuge"
	"github.com/centrifugal/protocol"
	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/internal/envelope"
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
// beside the channels, through the engine's Eval.
type history struct {
	engine scripter
	// key returns the Redis key called name of channel's node: in the
	// channel's slot on a cluster.
	key func(channel, name string) string
	// publish is the command a script publishes with.
	publish string
	// raw: publish frames without a shardcast envelope.
	raw bool
	// metaTTL is the node's Config.HistoryMetaTTL.
	metaTTL time.Duration
	// prefix is Config.KeyPrefix.
	prefix string
}

// newHistory returns the history of engine's channels; an engine that
// cannot run scripts gets one whose calls fail with ErrNotSupported.
func newHistory(engine shardcast.Broker, raw bool, prefix string, metaTTL time.Duration) *history {
	h := &history{raw: raw, prefix: prefix, metaTTL: metaTTL, publish: "publish", key: func(_, name string) string { return name }}
	h.engine, _ = engine.(scripter)
	if c, ok := engine.(*cluster.Broker); ok {
		l := c.Layout()
		h.publish = "spublish"
		h.key = func(ch, name string) string { return l.PartitionKey(l.Partition(ch), name) }
	}
	return h
}

// keys returns the stream, meta and, for idempotencyKey, result keys of ch.
// The result key spells the lengths out so that no two (channel, key)
// pairs share one.
func (h *history) keys(ch, idempotencyKey string) []string {
	keys := []string{
		h.key(ch, h.prefix+"history.stream."+ch),
		h.key(ch, h.prefix+"history.meta."+ch),
	}
	if idempotencyKey != "" {
		keys = append(keys, h.key(ch, h.prefix+"result."+strconv.Itoa(len(ch))+"."+ch+"."+idempotencyKey))
	}
	return keys
}

// newEpoch returns an epoch for a stream that has none: random, so that a
// stream that lost its meta (expiry, a restart without persistence, a
// failover that lost writes) never gets its old epoch back.
func newEpoch() string {
	return strconv.FormatUint(rand.Uint64()>>16, 36)
}

// millis renders d for PEXPIRE: at least 1 ms when positive, "0" for none.
func millis(d time.Duration) string {
	if d <= 0 {
		return "0"
	}
	return strconv.FormatInt(max(int64((d+time.Millisecond-1)/time.Millisecond), 1), 10)
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
	var pub []byte
	var err error
	if keep {
		pub, err = (&protocol.Publication{
			Data: data, Info: infoToProto(opts.ClientInfo), Tags: opts.Tags, Key: opts.Key,
			Removed: opts.Removed, Version: opts.Version, Time: now.UnixMilli(),
		}).MarshalCF()
	} else {
		pub, err = encodePublication(data, opts)
		pub = pub[1:] // the script writes the kind
	}
	if err != nil {
		return centrifuge.PublishResult{}, fmt.Errorf("centrifugebroker: encode publication: %w", err)
	}
	var header []byte
	if !h.raw {
		header = envelope.Append(nil, now, nil)
	}
	size, streamTTL, metaTTL, version := "0", "0", "0", "0"
	if keep {
		size, streamTTL = strconv.Itoa(opts.HistorySize), millis(opts.HistoryTTL)
		metaTTL = millis(orDefault(opts.HistoryMetaTTL, h.metaTTL))
		if opts.Version > 0 {
			version = strconv.FormatUint(opts.Version, 10)
		}
	}
	resultTTL := "0"
	if opts.IdempotencyKey != "" {
		resultTTL = millis(orDefault(opts.IdempotentResultTTL, DefaultIdempotentResultTTL))
	}
	delta := "0"
	if keep && opts.UseDelta {
		delta = "1"
	}
	keys := h.keys(ch, opts.IdempotencyKey)
	if len(keys) == 2 {
		keys = append(keys, keys[1]) // unused: no idempotency
	}
	v, err := h.engine.Eval(ctx, ch, publishScript, keys,
		string(header), string(pub), h.engine.WireChannel(ch), h.publish,
		size, streamTTL, metaTTL, newEpoch(), resultTTL, delta, version, opts.VersionEpoch)
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
	withPubs, from, count, reverse := "1", uint64(0), "0", "0"
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
		count = strconv.Itoa(f.Limit)
	}
	if f.Reverse {
		reverse = "1"
	}
	v, err := h.engine.Eval(ctx, ch, historyScript, h.keys(ch, ""),
		withPubs, strconv.FormatUint(from, 10), count, reverse, millis(orDefault(opts.MetaTTL, h.metaTTL)), newEpoch())
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
