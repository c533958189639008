package sharded

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/layoutkey"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAliasedAddressesAgree: brokers that reach the same instances under
// other names (127.0.0.1:port, localhost:port, a TCP proxy) have other
// fingerprints but route alike, so they agree through the instance ids
// and share one record and one registry, and messages cross between them;
// a list of other instances, or of the same ones in another order, is
// still refused.
func TestAliasedAddressesAgree(t *testing.T) {
	servers := startServers(t, 2)
	byIP := addrs(servers...)
	byName := make([]string, len(servers))
	for i, s := range servers {
		byName[i] = net.JoinHostPort("localhost", strconv.Itoa(s.Port()))
	}
	proxy := redistest.StartProxy(t, servers[1].Addr())
	viaProxy := []string{byIP[0], proxy.Addr()}

	recA, recB := newRecorder(), newRecorder()
	a := newBroker(t, Config{Addrs: byIP, Options: shardcast.Options{Handler: recA.handle}})
	b := newBroker(t, Config{Addrs: byName, Options: shardcast.Options{Handler: recB.handle}})
	p := newBroker(t, Config{Addrs: viaProxy})
	assert.NotEqual(t, a.Fingerprint(), b.Fingerprint(), "the fingerprints hash the names")
	assert.NotEqual(t, a.Fingerprint(), p.Fingerprint())

	fields, members := recordOn(t, servers[0], defaultAgreement)
	assert.Equal(t, a.Fingerprint(), fields["fingerprint"], "the record stays the first broker's")
	assert.ElementsMatch(t, []string{a.member.ID(), b.member.ID(), p.member.ID()}, members, "one registry")
	ids := strings.Split(fields["instance_ids"], "\n")
	require.Len(t, ids, 2)
	for i, s := range servers {
		v, err := s.Do(context.Background(), "GET", layoutkey.Instance(defaultAgreement))
		require.NoError(t, err)
		assert.Equal(t, ids[i], v, "the record names instance %d by the id it holds", i)
		assert.True(t, strings.HasPrefix(ids[i], "i-"), ids[i])
	}
	assert.NotEqual(t, ids[0], ids[1])

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	channels := channelNames("alias:", 20)
	require.NoError(t, a.Subscribe(ctx, channels...))
	require.NoError(t, b.Subscribe(ctx, channels...))
	publishAll(t, p, channels, payloadOf)
	waitFor(t, "the proxy broker's messages at both", func() bool {
		return len(recA.missing(channels, 1)) == 0 && len(recB.missing(channels, 1)) == 0
	})

	reversed := []string{byName[1], byName[0]}
	_, err := New(Config{Addrs: reversed, ControlAddr: byIP[0]})
	requireRefused(t, err, reversed, byIP, 3)
	other := startServers(t, 1)[0]
	elsewhere := []string{byName[0], other.Addr()}
	_, err = New(Config{Addrs: elsewhere})
	requireRefused(t, err, elsewhere, byIP, 3)
}

// TestAliasedAddressesOldRecord: a record written before the instance ids
// existed (no instance_ids field) compares by address, so a broker under
// other names is refused, until a broker that names the instances as the
// record does starts and records the ids; a record whose ids are stale (an
// instance lost its data, and with it its id) is brought up to date the
// same way.
func TestAliasedAddressesOldRecord(t *testing.T) {
	servers := startServers(t, 2)
	byIP := addrs(servers...)
	byName := make([]string, len(servers))
	for i, s := range servers {
		byName[i] = net.JoinHostPort("localhost", strconv.Itoa(s.Port()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first := newBroker(t, Config{Addrs: byIP})
	_, err := servers[0].Do(ctx, "HDEL", defaultAgreement.RecordKey(), "instance_ids")
	require.NoError(t, err)

	_, err = New(Config{Addrs: byName})
	requireRefused(t, err, byName, byIP, 1)

	second := newBroker(t, Config{Addrs: byIP})
	fields, _ := recordOn(t, servers[0], defaultAgreement)
	assert.NotEmpty(t, fields["instance_ids"], "the second broker of the record's layout recorded the ids")
	aliased := newBroker(t, Config{Addrs: byName})
	assert.Equal(t, first.Fingerprint(), aliased.member.Layout().Fingerprint, "registered under the record's layout")

	// Instance 1 loses its id; the next broker of the record's names
	// draws a new one and records it, and aliases follow.
	_, err = servers[1].Do(ctx, "DEL", layoutkey.Instance(defaultAgreement))
	require.NoError(t, err)
	_, err = New(Config{Addrs: []string{byName[0], byName[1]}})
	requireRefused(t, err, byName, byIP, 3)
	newBroker(t, Config{Addrs: byIP})
	newBroker(t, Config{Addrs: byName})
	_ = second
}
