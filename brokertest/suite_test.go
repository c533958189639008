package brokertest

import (
	"context"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
	"github.com/shardcast/shardcast/sharded"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mutantTimeout bounds the waits of a check run against a mutant: some
// faults show only as a message that never comes.
const mutantTimeout = 5 * time.Second

// shardedHarness is a Harness over the sharded engine on two standalone
// instances started for t.
func shardedHarness(t *testing.T) Harness {
	servers := []*redistest.Server{redistest.StartStandalone(t), redistest.StartStandalone(t)}
	addrs := []string{servers[0].Addr(), servers[1].Addr()}
	return Harness{
		New: Closing(func(opts shardcast.Options) (shardcast.Broker, error) {
			return sharded.New(sharded.Config{Addrs: addrs, Options: opts})
		}),
		KillSubscribers: func(t T) {
			for _, s := range servers {
				_, err := s.Do(context.Background(), "CLIENT", "KILL", "TYPE", "pubsub")
				noError(t, err, "CLIENT KILL TYPE pubsub on %s", s.Addr())
			}
		},
	}
}

// TestChecksPassThroughTheRecorder runs every check, through the recorder
// the mutant tests use, against a real engine behind a wrapper that
// changes nothing: whatever fails against a mutant fails because of the
// mutation.
func TestChecksPassThroughTheRecorder(t *testing.T) {
	base := breakCalls(shardedHarness(t), func(T, *faulty, shardcast.Options) {})
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			rec := record(func(rt T) { c.run(rt, base) })
			assert.False(t, rec.failed, "check %s failed on a correct broker:\n%s", c.name, rec.report())
			assert.False(t, rec.skipped, "check %s skipped: %s", c.name, rec.report())
		})
	}
}

// TestChecksCatchBrokenBrokers runs each check against brokers with the
// property it names broken on purpose: the check must fail, and say why.
func TestChecksCatchBrokenBrokers(t *testing.T) {
	base := shardedHarness(t)
	base.Timeout = mutantTimeout
	for _, m := range mutants {
		t.Run(m.name, func(t *testing.T) {
			c := findCheck(t, m.check)
			h := m.build(base)
			rec := record(func(rt T) { c.run(rt, h) })
			require.True(t, rec.failed, "check %s passed against a broker where %s", m.check, m.name)
			assert.Contains(t, rec.report(), m.want, "check %s failed for another reason", m.check)
			t.Logf("%s reported:\n%s", m.check, rec.report())
		})
	}
}

// TestEveryCheckHasAMutant: no check is left unproven.
func TestEveryCheckHasAMutant(t *testing.T) {
	for _, c := range checks {
		n := 0
		for _, m := range mutants {
			if m.check == c.name {
				n++
			}
		}
		assert.Positive(t, n, "no mutant shows that check %s can fail", c.name)
	}
	for _, m := range mutants {
		findCheck(t, m.check)
	}
}

func findCheck(t *testing.T, name string) check {
	t.Helper()
	for _, c := range checks {
		if c.name == name {
			return c
		}
	}
	t.Fatalf("no check named %q", name)
	return check{}
}
