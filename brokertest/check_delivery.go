package brokertest

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/shardcast/shardcast"
)

// oddChannels are valid channel names an engine might trip on: any
// non-empty byte string is a channel, braces (which Redis Cluster reads as
// hash tags) included.
var oddChannels = []string{
	"{tag}", "}{", "{", "}", "{}", "a{b}c", "with space", "new\nline", "\x00zero", "\xff\xfe",
	"ünïcödé", "*", "?", "[ab]", strings.Repeat("long", 256),
}

// checkDeliveryOnManyChannels: a Subscribe that returned means every
// channel delivers, each message exactly once, with its payload, on the
// channel it was published to, whatever the name.
func checkDeliveryOnManyChannels(t T, h Harness) {
	const n = 2000
	r := newRig(t, h, shardcast.Options{})
	chans := append(names("many:", n), oddChannels...)
	r.subscribe(chans...)
	for _, round := range []string{"1", "2"} {
		payload := func(ch string) string { return "p:" + round + ":" + ch }
		r.publishAll(chans, payload)
		r.waitDelivered(chans, payload, "round "+round+" on every subscribed channel")
	}
	var bad []string
	for _, ch := range chans {
		want := []string{"p:1:" + ch, "p:2:" + ch}
		if got := r.got.payloads(ch); !slices.Equal(got, want) {
			bad = append(bad, fmt.Sprintf("%q got %q", ch, head(got, 4)))
		}
	}
	if len(bad) > 0 {
		t.Errorf("%d of %d channels delivered other than exactly their two messages, e.g. %s",
			len(bad), len(chans), strings.Join(head(bad, 5), "; "))
	}
}

// checkPerChannelOrder: messages of one channel are handled in publish
// order, with no gap and no repeat, while several channels publish at once
// and share few workers.
func checkPerChannelOrder(t T, h Harness) {
	const (
		channels = 6
		perChan  = 1000
	)
	r := newRig(t, h, shardcast.Options{Workers: 2})
	chans := names("order:", channels)
	r.subscribe(chans...)
	ctx := r.ctx()
	errs := make([]error, channels)
	var wg sync.WaitGroup
	for i, ch := range chans {
		wg.Go(func() {
			for seq := 1; seq <= perChan; seq++ {
				if err := r.pub.Publish(ctx, ch, []byte(strconv.Itoa(seq))); err != nil {
					errs[i] = fmt.Errorf("Publish(%q) #%d: %w", ch, seq, err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		noError(t, err, "publishing in sequence")
	}
	last := func(string) string { return strconv.Itoa(perChan) }
	r.waitDelivered(chans, last, "the last message of every sequence")
	for _, ch := range chans {
		got := r.got.payloads(ch)
		for i, p := range got {
			if want := strconv.Itoa(i + 1); p != want {
				t.Errorf("channel %q: message %d is %q, want %q: out of order, repeated or missing", ch, i+1, p, want)
				break
			}
		}
		if len(got) != perChan {
			t.Errorf("channel %q delivered %d messages, want %d", ch, len(got), perChan)
		}
	}
}
