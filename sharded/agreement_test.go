package sharded

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/brokertest"
	"github.com/shardcast/shardcast/internal/layoutkey"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var defaultAgreement shardcast.Agreement

// recordOn returns the layout record's fields and the registry's members
// on s, read straight from Redis.
func recordOn(t *testing.T, s *redistest.Server, a shardcast.Agreement) (map[string]string, []string) {
	t.Helper()
	ctx := context.Background()
	raw, err := s.Do(ctx, "HGETALL", a.RecordKey())
	require.NoError(t, err)
	fields := map[string]string{}
	list, _ := raw.([]any)
	for i := 0; i+1 < len(list); i += 2 {
		fields[list[i].(string)] = list[i+1].(string)
	}
	raw, err = s.Do(ctx, "ZRANGE", layoutkey.Registry(a), "0", "-1")
	require.NoError(t, err)
	var members []string
	for _, m := range raw.([]any) {
		members = append(members, m.(string))
	}
	return fields, members
}

// requireRefused checks that err is the layout record's refusal of a
// broker over ours while brokers over recorded run, naming both.
func requireRefused(t *testing.T, err error, ours, recorded []string, live int) {
	t.Helper()
	require.ErrorIs(t, err, shardcast.ErrLayoutMismatch)
	var mm *shardcast.LayoutMismatchError
	require.True(t, errors.As(err, &mm))
	oursFP, err2 := Fingerprint(ours)
	require.NoError(t, err2)
	recFP, err2 := Fingerprint(recorded)
	require.NoError(t, err2)
	assert.Contains(t, err.Error(), oursFP)
	assert.Contains(t, err.Error(), recFP)
	assert.Contains(t, err.Error(), strings.Join(ours, ", "), "our instances are described")
	assert.Contains(t, err.Error(), strings.Join(recorded, ", "), "the recorded instances are described")
	assert.Equal(t, recorded, mm.Recorded.Instances)
	assert.Equal(t, "sharded", mm.Recorded.Engine)
	assert.Equal(t, live, mm.Live)
}

// TestLayoutAgreement: brokers over the same instances start side by
// side; one over another list is refused, whether it adds, drops or
// reorders instances, and leaves nothing behind; once the old brokers
// closed, the new list starts and replaces the record.
func TestLayoutAgreement(t *testing.T) {
	servers := startServers(t, 3)
	ab, abc := addrs(servers[0], servers[1]), addrs(servers...)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	rec := newRecorder()
	sub := newBroker(t, Config{Addrs: ab, Options: shardcast.Options{Handler: rec.handle}})
	pub := newBroker(t, Config{Addrs: ab}) // a publish-only broker takes part too
	fields, members := recordOn(t, servers[0], defaultAgreement)
	assert.Equal(t, sub.Fingerprint(), fields["fingerprint"])
	assert.Equal(t, "sharded", fields["engine"])
	assert.Equal(t, strings.Join(ab, "\n"), fields["instances"])
	assert.ElementsMatch(t, []string{sub.member.ID(), pub.member.ID()}, members)

	for _, other := range [][]string{abc, ab[:1], {ab[0], servers[2].Addr()}} {
		b, err := New(Config{Addrs: other, Options: shardcast.Options{Handler: rec.handle}})
		require.Nil(t, b)
		requireRefused(t, err, other, ab, 2)
	}
	// Reordered, the list starts with another instance: compared only
	// when the record is kept on an instance both name.
	_, err := New(Config{Addrs: []string{ab[1], ab[0]}, ControlAddr: ab[0]})
	requireRefused(t, err, []string{ab[1], ab[0]}, ab, 2)
	fields, members = recordOn(t, servers[0], defaultAgreement)
	assert.Equal(t, sub.Fingerprint(), fields["fingerprint"], "refused brokers change nothing")
	assert.Len(t, members, 2)

	require.NoError(t, sub.Subscribe(ctx, "still"))
	publishUntilAccepted(t, pub, "still")
	waitFor(t, "delivery between the agreeing brokers", func() bool { return rec.count("still") > 0 })

	require.NoError(t, sub.Close())
	_, err = New(Config{Addrs: abc})
	requireRefused(t, err, abc, ab, 1)
	require.NoError(t, pub.Close())
	_, members = recordOn(t, servers[0], defaultAgreement)
	assert.Empty(t, members, "Close leaves the registry")

	next := newBroker(t, Config{Addrs: abc})
	fields, members = recordOn(t, servers[0], defaultAgreement)
	assert.Equal(t, next.Fingerprint(), fields["fingerprint"], "the new layout replaced the record")
	assert.Equal(t, strings.Join(abc, "\n"), fields["instances"])
	assert.Equal(t, []string{next.member.ID()}, members)
	_, err = New(Config{Addrs: ab})
	requireRefused(t, err, ab, abc, 1)
}

// TestLayoutAgreementPlaces: the record goes to ControlAddr when set (an
// instance outside the list works too), each App keeps its own, and with
// Off nothing is written.
func TestLayoutAgreementPlaces(t *testing.T) {
	servers := startServers(t, 3)
	ab, ba := addrs(servers[0], servers[1]), addrs(servers[1], servers[0])
	control := servers[2].Addr()

	first := newBroker(t, Config{Addrs: ab, ControlAddr: control})
	fields, members := recordOn(t, servers[2], defaultAgreement)
	assert.Equal(t, first.Fingerprint(), fields["fingerprint"])
	assert.Equal(t, []string{first.member.ID()}, members)
	fields, _ = recordOn(t, servers[0], defaultAgreement)
	assert.Empty(t, fields, "nothing on the first instance")
	_, err := New(Config{Addrs: ba, ControlAddr: "redis://" + control})
	requireRefused(t, err, ba, ab, 1)

	other := shardcast.Agreement{App: "other:"}
	second := newBroker(t, Config{Addrs: ba, ControlAddr: control, Agreement: other})
	fields, members = recordOn(t, servers[2], other)
	assert.Equal(t, second.Fingerprint(), fields["fingerprint"])
	assert.Equal(t, []string{second.member.ID()}, members)

	// servers[1] holds the instance ids the brokers above wrote; a fresh
	// instance shows that Off writes nothing, not even an id.
	fresh := startServers(t, 1)[0]
	off := newBroker(t, Config{Addrs: addrs(fresh), Agreement: shardcast.Agreement{Off: true}})
	assert.Nil(t, off.member)
	n, err := fresh.Do(context.Background(), "DBSIZE")
	require.NoError(t, err)
	assert.EqualValues(t, 0, n, "a broker with the agreement off writes no key")

	_, err = New(Config{Addrs: ab, Agreement: shardcast.Agreement{App: "a{b}"}})
	assert.ErrorIs(t, err, shardcast.ErrInvalidConfig)
	_, err = New(Config{Addrs: ab, ControlAddr: "nope"})
	assert.ErrorIs(t, err, shardcast.ErrInvalidConfig)
}

// crashedBrokerTest is the test the child process runs.
const crashedBrokerTest = "TestCrashedBrokerProcess"

// TestCrashedBrokerProcess is not a test of its own: it is the broker
// TestLayoutAgreementAfterCrash starts in a child process and kills.
func TestCrashedBrokerProcess(t *testing.T) {
	arg, ok := brokertest.InProcess()
	if !ok {
		t.Skip("the child process of TestLayoutAgreementAfterCrash")
	}
	b, err := New(Config{Addrs: strings.Split(arg, ","), Agreement: shardcast.Agreement{Heartbeat: 100 * time.Millisecond}})
	require.NoError(t, err)
	brokertest.Ready(b.member.ID())
}

// TestLayoutAgreementAfterCrash: a broker that dies without Close holds
// the record until its registration expires; then a broker with another
// layout starts and replaces the record.
func TestLayoutAgreementAfterCrash(t *testing.T) {
	servers := startServers(t, 2)
	one, two := addrs(servers[0]), addrs(servers...)
	child := brokertest.StartProcess(t, crashedBrokerTest, strings.Join(one, ","))
	_, members := recordOn(t, servers[0], defaultAgreement)
	require.Equal(t, []string{child.ID}, members)
	_, err := New(Config{Addrs: two})
	requireRefused(t, err, two, one, 1)

	child.Kill()
	_, members = recordOn(t, servers[0], defaultAgreement)
	assert.Equal(t, []string{child.ID}, members, "a killed broker does not leave")
	var next *Broker
	waitFor(t, "the dead broker's registration to expire", func() bool {
		b, err := New(Config{Addrs: two})
		if err != nil {
			requireRefused(t, err, two, one, 1)
			return false
		}
		next = b
		return true
	})
	defer next.Close()
	fields, members := recordOn(t, servers[0], defaultAgreement)
	assert.Equal(t, next.Fingerprint(), fields["fingerprint"])
	assert.Equal(t, []string{next.member.ID()}, members, "the expired registration was pruned")
}

// TestLayoutRecordUnreachable: a control instance that is down or frozen
// fails New with an error naming it and the record, within
// Conn.CommandTimeout for a frozen one, and leaves no goroutine behind
// (the package's TestMain checks).
func TestLayoutRecordUnreachable(t *testing.T) {
	servers := startServers(t, 2)
	shards := addrs(servers[0])
	control := servers[1]

	require.NoError(t, control.Pause())
	_, err := New(Config{Addrs: shards, ControlAddr: control.Addr(), Conn: shardcast.ConnOptions{CommandTimeout: 200 * time.Millisecond}})
	require.NoError(t, control.Resume())
	require.Error(t, err)
	assert.NotErrorIs(t, err, shardcast.ErrLayoutMismatch)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), defaultAgreement.RecordKey()+" on "+control.Addr())

	require.NoError(t, control.Kill())
	_, err = New(Config{Addrs: shards, ControlAddr: control.Addr()})
	require.Error(t, err)
	assert.NotErrorIs(t, err, shardcast.ErrLayoutMismatch)
	assert.Contains(t, err.Error(), defaultAgreement.RecordKey()+" on "+control.Addr())
	assert.Contains(t, err.Error(), "refused")
}

// TestLayoutHeartbeatFailureIsReported: while the control instance is
// down, each failed heartbeat raises an EventError naming it; the broker
// keeps working, and registers again once the instance is back (here
// restarted empty: the heartbeat writes the record again).
func TestLayoutHeartbeatFailureIsReported(t *testing.T) {
	servers := startServers(t, 2)
	control := servers[1]
	var evs events
	b := newBroker(t, Config{Addrs: addrs(servers[0]), ControlAddr: control.Addr(),
		Options:   shardcast.Options{OnEvent: evs.Add},
		Agreement: shardcast.Agreement{Heartbeat: 20 * time.Millisecond}})
	require.NoError(t, control.Kill())
	waitFor(t, "a heartbeat error", func() bool { return len(evs.Of(shardcast.EventError)) > 0 })
	ev := evs.Of(shardcast.EventError)[0]
	assert.Equal(t, control.Addr(), ev.Shard)
	assert.Contains(t, ev.Err.Error(), defaultAgreement.RecordKey())
	require.NoError(t, b.Publish(context.Background(), "x", []byte("still publishing")))

	require.NoError(t, control.Restart(context.Background()))
	waitFor(t, "the registration to be back", func() bool {
		fields, members := recordOn(t, control, defaultAgreement)
		return fields["fingerprint"] == b.Fingerprint() && len(members) == 1 && members[0] == b.member.ID()
	})
}

// TestCloseWithFrozenControl: Close does not hang on a control instance
// that stopped answering: its leave gives up after Conn.CommandTimeout
// (whether the ZREM it wrote runs once the instance thaws is up to
// Redis), and the heartbeat ends (TestMain checks for goroutines).
func TestCloseWithFrozenControl(t *testing.T) {
	servers := startServers(t, 2)
	control := servers[1]
	b, err := New(Config{Addrs: addrs(servers[0]), ControlAddr: control.Addr(),
		Conn:      shardcast.ConnOptions{CommandTimeout: 200 * time.Millisecond},
		Agreement: shardcast.Agreement{Heartbeat: 10 * time.Millisecond}})
	require.NoError(t, err)
	require.NoError(t, control.Pause())
	closed := make(chan struct{})
	go func() { defer close(closed); _ = b.Close() }()
	select {
	case <-closed:
	case <-time.After(waitTimeout):
		t.Fatal("Close hung on a frozen control instance")
	}
	require.NoError(t, control.Resume())
}

// TestLayoutAgreementFollow: with Agreement.Follow, the first broker
// writes its own list; a broker configured with another list adopts the
// recorded one instead of failing (keeping its own URL entry for an
// instance both name), changes no record, and routes every channel as
// the fleet does; without Follow the same list is still refused; and a
// record of the other engine cannot be followed and fails New naming why.
func TestLayoutAgreementFollow(t *testing.T) {
	servers := startServers(t, 3)
	ab := addrs(servers[0], servers[1])
	follow := shardcast.Agreement{Follow: true}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	firstRec, followerRec := newRecorder(), newRecorder()
	first := newBroker(t, Config{Addrs: ab, Agreement: follow, Options: shardcast.Options{Handler: firstRec.handle}})
	fields, _ := recordOn(t, servers[0], defaultAgreement)
	require.Equal(t, first.Fingerprint(), fields["fingerprint"], "the first broker writes its own list")

	configured := []string{"redis://" + ab[0], servers[2].Addr()}
	follower := newBroker(t, Config{Addrs: configured, Agreement: follow, Options: shardcast.Options{Handler: followerRec.handle}})
	assert.Equal(t, first.Fingerprint(), follower.Fingerprint())
	assert.Equal(t, ab, follower.member.Layout().Instances)
	fields, members := recordOn(t, servers[0], defaultAgreement)
	assert.Equal(t, first.Fingerprint(), fields["fingerprint"], "following changes no record")
	assert.ElementsMatch(t, []string{first.member.ID(), follower.member.ID()}, members)

	_, err := New(Config{Addrs: configured})
	requireRefused(t, err, addrs(servers[0], servers[2]), ab, 2)

	channels := channelNames("follow-", 20)
	for _, ch := range channels {
		require.NoError(t, first.Subscribe(ctx, ch))
		require.NoError(t, follower.Subscribe(ctx, ch))
	}
	var onB int64
	for _, ch := range channels {
		onB += numsub(t, servers[1], ch)
		assert.Zero(t, numsub(t, servers[2], ch), "%s: the configured instance outside the record is not used", ch)
	}
	assert.NotZero(t, onB, "the follower subscribes on the recorded instance it was not configured with")
	payload := func(ch string) []byte { return []byte(ch) }
	publishAll(t, first, channels, payload)
	publishAll(t, follower, channels, payload)
	waitFor(t, "both publishers' messages at both brokers", func() bool {
		return len(firstRec.missing(channels, 2)) == 0 && len(followerRec.missing(channels, 2)) == 0
	})

	foreign := shardcast.Agreement{App: "foreign:", Follow: true}
	_, err = servers[0].Do(ctx, "HSET", foreign.RecordKey(), "version", "1", "fingerprint", "c0ffee",
		"engine", "cluster", "partitions", "128", "prefix", "", "description", `cluster: 128 partitions, prefix ""`)
	require.NoError(t, err)
	_, err = servers[0].Do(ctx, "ZADD", layoutkey.Registry(foreign), strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10), "a-cluster-broker")
	require.NoError(t, err)
	_, err = New(Config{Addrs: ab, Agreement: foreign})
	require.ErrorIs(t, err, shardcast.ErrLayoutMismatch)
	assert.Contains(t, err.Error(), "cannot adopt the recorded layout c0ffee")
	assert.Contains(t, err.Error(), "the cluster engine's")
}
