package pubconn

import (
	"context"
	"time"

	"github.com/shardcast/shardcast/envelope"
	"github.com/shardcast/shardcast/internal/resp"
)

// Publish sends PUBLISH channel payload, with payload wrapped in the
// shardcast envelope stamped now unless raw, and waits for the reply
// (bounded by ctx). A failure of the wire fails the calls waiting on it;
// their messages may or may not have been published.
func (p *Pub) Publish(ctx context.Context, channel string, payload []byte, raw bool, now time.Time) error {
	_, err := p.do(ctx, command{channel: channel, payload: payload, raw: raw, now: now})
	return err
}

// SPublish sends SPUBLISH keyPrefix+channel payload, encoded as Publish
// does; keyPrefix (a partition's "{tag}." and the layout prefix) saves
// building the key per call.
func (p *Pub) SPublish(ctx context.Context, keyPrefix, channel string, payload []byte, raw bool, now time.Time) error {
	_, err := p.do(ctx, command{sharded: true, keyPrefix: keyPrefix, channel: channel, payload: payload, raw: raw, now: now})
	return err
}

// SPublishAgain is SPublish of a message stamped now that was sent before
// (a resend after a redirection or a failover): its reply is timed from
// this call, not from now, which may be older than the reply timeout.
func (p *Pub) SPublishAgain(ctx context.Context, keyPrefix, channel string, payload []byte, raw bool, now time.Time) error {
	_, err := p.do(ctx, command{sharded: true, keyPrefix: keyPrefix, channel: channel, payload: payload, raw: raw, now: now, again: true})
	return err
}

// PublishAsync queues PUBLISH channel payload, encoded as Publish does,
// and returns without waiting for the reply: done is called once with the
// outcome, as Publish would have returned it (nil once Redis accepted the
// message). payload is encoded before PublishAsync returns, so the caller
// may reuse it at once.
//
// PublishAsync waits, bounded by ctx, only when there is no connection and
// one must be dialled; the caller that finds no write in progress writes
// what is queued (bounded by Timeouts.Write), as Publish does. Once
// queued, the call is no longer bounded by ctx. A non-nil error means the
// command was not queued (it wraps ErrNotSent: the Pub is closed, the dial
// failed or ctx ended first, the backlog is full, the wire had failed), and
// done is never called. Otherwise done is called exactly once, on the
// Pub's reader goroutine: when the reply arrives, when the wire fails
// (calls whose command never reached a write get an error wrapping
// ErrNotSent, as with Publish), when the watchdog drops a silent wire, or
// by Close, before Close returns. done must not block: it holds up every
// reply behind it; in particular it must not call Publish or wait for
// another PublishAsync.
//
// Commands of one Pub go on the wire in the order their calls queued
// them, whatever the form, so calls made one after another from one
// goroutine are sent in call order. A func value passed in done is not
// copied; passing the same one for many calls allocates nothing.
func (p *Pub) PublishAsync(ctx context.Context, channel string, payload []byte, raw bool, now time.Time, done func(error)) error {
	_, err := p.send(ctx, command{channel: channel, payload: payload, raw: raw, now: now}, asyncDone(done))
	return err
}

// SPublishAsync is PublishAsync for SPUBLISH keyPrefix+channel, encoded as
// SPublish does.
func (p *Pub) SPublishAsync(ctx context.Context, keyPrefix, channel string, payload []byte, raw bool, now time.Time, done func(error)) error {
	_, err := p.send(ctx, command{sharded: true, keyPrefix: keyPrefix, channel: channel, payload: payload, raw: raw, now: now}, asyncDone(done))
	return err
}

// asyncDone is done, or a func that ignores the outcome when done is nil:
// a call of PublishAsync is told apart from a waiting one by its fn.
func asyncDone(done func(error)) func(error) {
	if done == nil {
		return ignoreOutcome
	}
	return done
}

func ignoreOutcome(error) {}

// appendPublish encodes PUBLISH channel <envelope(payload)>, or SPUBLISH
// keyPrefix+channel when sharded.
func appendPublish(b []byte, sharded bool, keyPrefix, channel string, payload []byte, raw bool, now time.Time) []byte {
	if sharded {
		b = append(b, "*3\r\n$8\r\nSPUBLISH\r\n"...)
	} else {
		b = append(b, "*3\r\n$7\r\nPUBLISH\r\n"...)
	}
	b = resp.AppendHeader(b, '$', len(keyPrefix)+len(channel))
	b = append(append(append(b, keyPrefix...), channel...), '\r', '\n')
	if raw {
		return resp.AppendBulkBytes(b, payload)
	}
	b = resp.AppendHeader(b, '$', envelope.Size(len(payload)))
	b = envelope.Append(b, now, payload)
	return append(b, '\r', '\n')
}
