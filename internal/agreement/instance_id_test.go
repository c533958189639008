package agreement

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/engine"
	"github.com/shardcast/shardcast/internal/pubconn"
	"github.com/shardcast/shardcast/internal/subconn"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// shardedLayout is a sharded layout over names, with ids.
func shardedLayout(fp string, names, ids []string) shardcast.LayoutRecord {
	return shardcast.LayoutRecord{Fingerprint: fp, Description: "sharded: " + strings.Join(names, ", "),
		Engine: "sharded", Instances: names, InstanceIDs: ids}
}

// TestInstanceID: the first call writes an id, every later one reads it
// back; a user that may not run the script gets the address form and the
// refusal.
func TestInstanceID(t *testing.T) {
	s := redistest.StartStandalone(t, redistest.WithArgs("--user", "pubonly", "on", ">pw", "&*", "+publish", "+ping"))
	run := runner(t, s.Addr())
	a := shardcast.Agreement{App: "app:"}
	ctx := context.Background()
	id, err := InstanceID(ctx, run, a, s.Addr())
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(id, "i-"), id)
	again, err := InstanceID(ctx, run, a, s.Addr())
	require.NoError(t, err)
	assert.Equal(t, id, again)
	stored, err := s.Do(ctx, "GET", "app:{7lw}:shardcast-layout:instance")
	require.NoError(t, err)
	assert.Equal(t, id, stored)

	pub := pubconn.New(subconn.Dialer{Addr: s.Addr(), Username: "pubonly", Password: "pw", Timeout: 2 * time.Second},
		pubconn.Timeouts{Write: time.Second, Reply: 2 * time.Second, Redial: 10 * time.Millisecond})
	defer pub.Close()
	refused := func(ctx context.Context, s *shardcast.Script, keys, args []string) (any, error) {
		return engine.Eval(ctx, pub, s, keys, args)
	}
	id, err = InstanceID(ctx, refused, a, s.Addr())
	assert.Equal(t, AddrIDPrefix+s.Addr(), id)
	_, isRefusal := Refused(err)
	assert.True(t, isRefusal, "%v", err)
}

// TestJoinRefusedTurnsRecordOff: a server that refuses the join script
// with NOPERM gives no Member and no error, and one Warn that names the
// refusal and Agreement.Off.
func TestJoinRefusedTurnsRecordOff(t *testing.T) {
	s := redistest.StartStandalone(t, redistest.WithArgs("--user", "pubonly", "on", ">pw", "&*", "+publish", "+ping"))
	pub := pubconn.New(subconn.Dialer{Addr: s.Addr(), Username: "pubonly", Password: "pw", Timeout: 2 * time.Second},
		pubconn.Timeouts{Write: time.Second, Reply: 2 * time.Second, Redial: 10 * time.Millisecond})
	defer pub.Close()
	run := func(ctx context.Context, s *shardcast.Script, keys, args []string) (any, error) {
		return engine.Eval(ctx, pub, s, keys, args)
	}
	var logged bytes.Buffer
	cfg := config(run, "", clusterLayout(t, 128, ""), nil)
	cfg.Log = slog.New(slog.NewTextHandler(&logged, nil))
	m, err := Join(context.Background(), cfg)
	require.NoError(t, err)
	assert.Nil(t, m)
	out := logged.String()
	assert.Equal(t, 1, strings.Count(out, "level=WARN"), out)
	assert.Contains(t, out, "layout record off")
	assert.Contains(t, out, "NOPERM")
	assert.Contains(t, out, "Agreement.Off")

	// Any other failure still fails Join.
	require.NoError(t, s.Stop())
	_, err = Join(context.Background(), cfg)
	require.Error(t, err)
}

// TestJoinSameInstancesOtherNames: a sharded layout whose fingerprint
// differs from the record's but whose instance ids are the record's joins,
// registered under the record's layout; other ids, ids in another order,
// or a record without ids are a mismatch; a broker of the record's own
// layout brings the record's ids up to date.
func TestJoinSameInstancesOtherNames(t *testing.T) {
	s := redistest.StartStandalone(t)
	run := runner(t, s.Addr())
	byIP := shardedLayout("sharded-aaa", []string{"127.0.0.1:1", "127.0.0.1:2"}, []string{"i-1", "i-2"})
	byName := shardedLayout("sharded-bbb", []string{"localhost:1", "localhost:2"}, []string{"i-1", "i-2"})
	swapped := shardedLayout("sharded-ccc", []string{"localhost:2", "localhost:1"}, []string{"i-2", "i-1"})
	noIDs := shardedLayout("sharded-bbb", byName.Instances, nil)

	a := join(t, config(run, "", byIP, nil))
	defer a.Leave()
	b := join(t, config(run, "", byName, nil))
	defer b.Leave()
	assert.Equal(t, byIP, b.Layout(), "registered under the record's layout")
	st := read(t, run, "")
	assert.Equal(t, byIP, *st.Record, "the record is unchanged")
	assert.ElementsMatch(t, []string{a.ID(), b.ID()}, keys(st.Brokers))

	_, err := Join(context.Background(), config(run, "", swapped, nil))
	requireMismatch(t, err, swapped, byIP)
	_, err = Join(context.Background(), config(run, "", noIDs, nil))
	requireMismatch(t, err, noIDs, byIP)

	// The record's own layout with new ids (an instance lost its id)
	// records them; the aliases follow the new ids.
	fresh := byIP
	fresh.InstanceIDs = []string{"i-1", "i-3"}
	c := join(t, config(run, "", fresh, nil))
	defer c.Leave()
	assert.Equal(t, fresh, *read(t, run, "").Record)
	_, err = Join(context.Background(), config(run, "", byName, nil))
	requireMismatch(t, err, byName, fresh)
	aliased := byName
	aliased.InstanceIDs = fresh.InstanceIDs
	d := join(t, config(run, "", aliased, nil))
	d.Leave()
}
