package brokertest

import (
	"bytes"
	"time"

	"github.com/shardcast/shardcast"
)

// awkward is a payload an envelope decoder might trip on.
var awkward = []byte{0xc1, 0x01, 0, 1, 2, 0xff, '{', '}', 0xc3, 0x28}

// checkPublishedAt: a message carries the publisher's clock at Publish
// time (to the envelope's microsecond) and its payload byte for byte; in
// Raw mode the payload is the same and PublishedAt is zero.
func checkPublishedAt(t T, h Harness) {
	t.Helper()
	r := newRig(t, h, shardcast.Options{})
	r.subscribe("at:env")
	before := time.Now()
	noError(t, r.pub.Publish(r.ctx(), "at:env", awkward), "Publish")
	m := waitOne(t, h, r, "at:env")
	after := time.Now()
	if !bytes.Equal(m.Payload, awkward) {
		t.Errorf("payload % x arrived as % x", awkward, m.Payload)
	}
	// The envelope keeps microseconds; the lower bound allows for that.
	if m.PublishedAt.Before(before.Truncate(time.Microsecond)) || m.PublishedAt.After(after) {
		t.Errorf("PublishedAt = %v, want between the Publish call (%v) and the delivery (%v)",
			m.PublishedAt, before, after)
	}

	raw := newRig(t, h, shardcast.Options{Raw: true})
	raw.subscribe("at:raw")
	noError(t, raw.pub.Publish(raw.ctx(), "at:raw", awkward), "Publish in Raw mode")
	m = waitOne(t, h, raw, "at:raw")
	if !bytes.Equal(m.Payload, awkward) {
		t.Errorf("Raw mode: payload % x arrived as % x", awkward, m.Payload)
	}
	if !m.PublishedAt.IsZero() {
		t.Errorf("Raw mode: PublishedAt = %v, want the zero time", m.PublishedAt)
	}
}

// waitOne waits for channel's first message and returns it.
func waitOne(t T, h Harness, r *rig, channel string) shardcast.Message {
	t.Helper()
	waitFor(t, h, "a message on "+channel, func() (bool, string) {
		return len(r.got.messages(channel)) > 0, "none received"
	})
	return r.got.messages(channel)[0]
}
