package centrifugebroker

import (
	"testing"

	"github.com/shardcast/shardcast/redistest"
	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: Close
// must stop everything the Broker and its engine started, and the tests
// shut down every node and client they start.
//
// One Centrifuge goroutine is exempt: a node unsubscribes an emptied channel
// from its broker a second later, on a worker Node.Shutdown does not wait
// for; the worker sleeps out that second, gets ErrClosed from the closed
// Broker, and exits.
//
// And one centrifuge-go goroutine: a command a client sent as the server
// disconnected it to reconnect (a server-side subscriber after a loss)
// waits for its reply on a goroutine that took the new connection's close
// channel, so it ends only when the client's ReadTimeout (10 s in these
// tests) runs out.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(redistest.StoppingOnDemand(m),
		goleak.IgnoreAnyFunction("github.com/centrifugal/centrifuge.(*Node).unsubscribeFromBrokerWhenEmpty.func1"),
		goleak.IgnoreAnyFunction("github.com/centrifugal/centrifuge-go.(*Client).sendAsync.func1"),
	)
}
