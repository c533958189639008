package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/centrifugal/centrifuge"
)

// mapOps are the calls -map-ops can name, in the order they run.
var mapOps = []string{"publish", "state"}

// mapOpsOf returns the calls a -map-ops list names, in run order.
func mapOpsOf(list string) ([]string, error) { return callsOf("-map-ops", list, mapOps) }

// mapStatePage is the Limit of a ReadState call: Centrifuge's default
// page size for map subscriptions (MapChannelOptions.DefaultPageSize), so
// one call reads a whole channel of up to that many keys, as a client's
// first page does.
const mapStatePage = 100

// mapWorkload is the state every run keeps in Redis and the calls its
// workers make: keys entries in each of channels map channels, each
// entry's value a payload of the same bytes (a collaborative document's
// cursors, a chat room's typing flags).
type mapWorkload struct {
	channels []string
	keys     []string
	data     []byte
}

// newMapWorkload names channels map channels (prefix + index) and keys
// keys per channel, with values of payload bytes.
func newMapWorkload(prefix string, channels, keys, payload int) *mapWorkload {
	w := &mapWorkload{channels: channelNames(prefix, channels), data: make([]byte, payload)}
	for k := range keys {
		w.keys = append(w.keys, "user"+strconv.Itoa(k))
	}
	for i := range w.data {
		w.data[i] = 'a' + byte(i%26)
	}
	return w
}

// pair returns the channel and key of call i: every channel once, then
// every channel again with the next key.
func (w *mapWorkload) pair(i int) (ch, key string) {
	return w.channels[i%len(w.channels)], w.keys[i/len(w.channels)%len(w.keys)]
}

// call makes op's call number i on mb. publish sets the pair's key (a
// replace: the entry exists after the fill) and appends it to the
// channel's stream; state reads the channel's first page. short reports
// a ReadState answer with fewer entries than the workload keeps (an entry
// lost or expired), or a suppressed publish: both brokers must do the
// same work.
func (w *mapWorkload) call(ctx context.Context, mb centrifuge.MapBroker, op string, i int) (short bool, err error) {
	ch, key := w.pair(i)
	switch op {
	case "publish":
		r, err := mb.Publish(ctx, ch, key, centrifuge.MapPublishOptions{Data: w.data})
		return err == nil && r.Suppressed, err
	case "state":
		r, err := mb.ReadState(ctx, ch, centrifuge.MapReadStateOptions{Limit: mapStatePage})
		return err == nil && len(r.Publications) < min(len(w.keys), mapStatePage), err
	}
	return false, fmt.Errorf("map: unknown call %q", op)
}
