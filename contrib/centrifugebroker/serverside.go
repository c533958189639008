package centrifugebroker

import (
	"reflect"
	"strings"

	"github.com/centrifugal/centrifuge"
)

// A client SDK resubscribes a client-side subscription that the server
// unsubscribed with the insufficient-state code, but drops a server-side
// one: the server made it, and only a new connection brings it back.
// Centrifuge itself therefore disconnects a client whose server-side
// subscription lost state (DisconnectInsufficientState, on which the SDK
// reconnects and the server subscribes it again, recovering), and the
// resync sweep does the same. Centrifuge does not export which
// subscriptions are server-side: the flag is a bit of ChannelContext's
// unexported flags field. serverSide reads it with reflect where the
// struct is laid out as in the Centrifuge version this module pins, and
// answers "unknown" otherwise, on which the sweep disconnects: the safe
// action for either kind, only a heavier one for a client-side
// subscription.

// serverSideFlag is the bit of a server-side subscription in
// ChannelContext.flags (Centrifuge v0.40.1: flagServerSide, the sixth
// flag).
const serverSideFlag = 1 << 5

// channelContextLayout is ChannelContext's fields, name and type, in
// Centrifuge v0.40.1.
const channelContextLayout = "subscribingCh chan struct {}; joinGate *centrifuge.joinGate; info []uint8; " +
	"streamPosition centrifuge.StreamPosition; expireAt int64; positionCheckTime int64; metaTTLSeconds int64; " +
	"flags uint16; subscribeAllowed bool; mapClientPresenceChannel string; mapUserPresenceChannel string; " +
	"subGen uint64; Source uint8"

// flagsField is the index of ChannelContext.flags, or -1 when the struct
// is not laid out as channelContextLayout says.
var flagsField = func() int {
	t := reflect.TypeFor[centrifuge.ChannelContext]()
	fields := make([]string, t.NumField())
	at := -1
	for i := range t.NumField() {
		f := t.Field(i)
		fields[i] = f.Name + " " + f.Type.String()
		if f.Name == "flags" {
			at = i
		}
	}
	if strings.Join(fields, "; ") != channelContextLayout {
		return -1
	}
	return at
}()

// serverSide reports whether cc is a server-side subscription, and
// whether that is known.
func serverSide(cc centrifuge.ChannelContext) (side, known bool) {
	if flagsField < 0 {
		return false, false
	}
	return reflect.ValueOf(cc).Field(flagsField).Uint()&serverSideFlag != 0, true
}
