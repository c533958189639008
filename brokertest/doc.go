// Package brokertest checks that a shardcast.Broker keeps the promises of
// the Broker contract, in the spirit of testing/slogtest: one entry point,
// Run, exercises every property a user relies on against any engine, each
// as its own subtest named after the property.
//
//	func TestConformance(t *testing.T) {
//		servers := startServers(t)
//		brokertest.Run(t, brokertest.Harness{
//			New: brokertest.Closing(func(opts shardcast.Options) (shardcast.Broker, error) {
//				return sharded.New(sharded.Config{Addrs: servers, Options: opts})
//			}),
//			KillSubscribers: killPubSubClients,
//		})
//	}
//
// The suite talks to brokers only through shardcast.Broker (plus an
// optional Stats method), so it fits any engine, including adapters built
// on top of one. Every check waits for conditions with a deadline, never
// for a fixed time; to show that a message was not delivered it publishes
// a marker after it on the same channel and waits for the marker, which
// per-channel order makes conclusive.
//
// Each check fails when the property it names is broken: the package's own
// tests run every check against deliberately broken wrappers of a real
// engine and assert that the named check reports the fault.
//
// Beside the suite it holds what the engines' own tests share about a
// broker: EventLog keeps every event it raised, CaptureDefaultLog what it
// logged to slog.Default.
package brokertest
