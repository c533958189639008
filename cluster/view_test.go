package cluster

import (
	"strconv"
	"testing"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/engine"
	"github.com/shardcast/shardcast/internal/layoutkey"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLosing: the partitions that lose channels are every one when the
// count grows or the prefix changes, and those past the new count when
// it shrinks; checked against where channels really go.
func TestLosing(t *testing.T) {
	for _, c := range []struct {
		from, to         int
		fromPre, toPre   string
		wantFirst, wantN int
	}{
		{128, 1024, "", "", 0, 128},
		{1024, 128, "", "", 128, 896},
		{256, 256, "a:", "b:", 0, 256},
		{1024, 256, "a:", "b:", 0, 1024},
	} {
		from, to := mustLayout(c.from, c.fromPre), mustLayout(c.to, c.toPre)
		got := losing(from, to)
		require.Len(t, got, c.wantN, "%d%q -> %d%q", c.from, c.fromPre, c.to, c.toPre)
		assert.Equal(t, c.wantFirst, got[0])
		lose := map[int]bool{}
		for _, p := range got {
			lose[p] = true
		}
		for i := range 20000 {
			ch := "ch" + strconv.Itoa(i)
			if from.Key(ch) != to.Key(ch) {
				assert.True(t, lose[from.Partition(ch)], "%s leaves partition %d, which gets no barrier", ch, from.Partition(ch))
			}
		}
	}
}

// TestViewRoutes: a view moving from 128 to 1024 partitions keeps its
// bank, one changing the prefix takes the other; channels whose wire key
// does not change do not move; publishes go to the new key only once
// switched; split finds the path and channel of either layout's keys.
func TestViewRoutes(t *testing.T) {
	l128, l1024, l1024b := mustLayout(128, ""), mustLayout(1024, ""), mustLayout(1024, "b:")
	v := newView(l128, 0, [2]string{})
	grow := v.withNext(l1024, "id", "barrier")
	assert.Equal(t, 0, grow.nextBank)
	stay, moves := 0, 0
	for i := range 2000 {
		ch := "c" + strconv.Itoa(i)
		cur, next, moving := grow.partitions(ch)
		assert.Equal(t, l128.Key(ch) != l1024.Key(ch), moving, ch)
		if !moving {
			stay++
			assert.Equal(t, cur, next)
		} else {
			moves++
		}
		p, kp, _ := grow.publishRoute(ch)
		assert.Equal(t, l128.Key(ch), kp+ch, "not switched: the old key")
		path, got, ok := grow.split(l1024.Key(ch), nil)
		require.True(t, ok)
		assert.Equal(t, ch, got)
		assert.Equal(t, next, path)
		path, _, ok = grow.split(l128.Key(ch), nil)
		require.True(t, ok)
		assert.Equal(t, cur, path)
		assert.Equal(t, p, cur)
	}
	t.Logf("128 -> 1024: %d channels stay, %d move", stay, moves)
	assert.NotZero(t, stay)

	sw := grow.copyView()
	sw.switched = true
	for i := range 200 {
		ch := "c" + strconv.Itoa(i)
		_, kp, _ := sw.publishRoute(ch)
		assert.Equal(t, l1024.Key(ch), kp+ch, "switched: the new key")
	}
	assert.Equal(t, l1024, sw.publishLayout())

	pre := v.withNext(l1024b, "id", "barrier")
	assert.Equal(t, 1, pre.nextBank)
	for i := range 200 {
		ch := "c" + strconv.Itoa(i)
		_, next, moving := pre.partitions(ch)
		assert.True(t, moving, "a new prefix moves every channel")
		path, got, ok := pre.split(l1024b.Key(ch), nil)
		require.True(t, ok)
		assert.Equal(t, ch, got)
		assert.Equal(t, bankSize+next, path)
		assert.Equal(t, l1024b.Key(ch), pre.key(path, ch))
	}
}

// TestViewSplitOverlappingPrefixes: with prefixes "a" and "ab" in use,
// a key is given to the layout that puts its channel in the key's
// partition.
func TestViewSplitOverlappingPrefixes(t *testing.T) {
	la, lab := mustLayout(128, "a"), mustLayout(128, "ab")
	v := newView(la, 0, [2]string{}).withNext(lab, "id", "barrier")
	for i := range 500 {
		ch := "x" + strconv.Itoa(i)
		path, got, ok := v.split(lab.Key(ch), nil)
		require.True(t, ok)
		if la.Partition("b"+ch) != lab.Partition(ch) {
			assert.Equal(t, ch, got)
			assert.Equal(t, bankSize+lab.Partition(ch), path)
		}
		path, got, ok = v.split(la.Key(ch), nil)
		require.True(t, ok)
		assert.Equal(t, ch, got)
		assert.Equal(t, la.Partition(ch), path)
	}
}

// TestViewSplitBarrier: the barrier of a re-layout from prefix "x:" to ""
// is sent under every partition's tag with the old prefix; each of those
// keys reads as the barrier on the old bank's path, including the one
// partition where the new layout would also place "x:" + barrier name.
func TestViewSplitBarrier(t *testing.T) {
	from, to := mustLayout(128, "x:"), mustLayout(128, "")
	barrier := layoutkey.Barrier(shardcast.Agreement{}, "20261201T034944Z-34559dccc6f6")
	v := newView(from, 0, [2]string{}).withNext(to, "20261201T034944Z-34559dccc6f6", barrier)
	for p := range from.Partitions() {
		key := "{" + from.Tag(p) + "}." + from.Prefix() + barrier
		path, got, ok := v.split(key, nil)
		require.True(t, ok)
		assert.Equal(t, barrier, got, "partition %d", p)
		assert.Equal(t, p, path, "partition %d", p)
	}
}

func TestMasterChanges(t *testing.T) {
	added, removed := masterChanges(shardcast.Assignment{"a", "b", "a", ""}, shardcast.Assignment{"c", "b", "a", "d"})
	assert.Equal(t, []string{"c", "d"}, added)
	assert.Nil(t, removed)
	added, removed = masterChanges(shardcast.Assignment{"a", "b"}, shardcast.Assignment{"b", ""})
	assert.Nil(t, added)
	assert.Equal(t, []string{"a"}, removed)
}

// TestViewSplitProbe: a probe travels on a path of either bank under that
// bank's prefix; its key reads as the probe channel on that path whichever
// bank is in force, never as an application channel under the other
// bank's (shorter) prefix, which would hand the probe to the Handler
// (chaos soak: 126 probes delivered after a re-layout from "" to "x:").
func TestViewSplitProbe(t *testing.T) {
	l, lx := mustLayout(128, ""), mustLayout(128, "x:")
	during := newView(l, 0, [2]string{}).withNext(lx, "id", "barrier")
	after := newView(lx, 1, during.prefix)
	probe := engine.ProbeChannelPrefix + "node:7"
	for _, v := range []*view{during, after} {
		for _, bank := range []int{0, 1} {
			path := bank*bankSize + 5
			got, ch, ok := v.split(v.key(path, probe), nil)
			require.True(t, ok)
			assert.Equal(t, probe, ch)
			assert.Equal(t, path, got)
		}
	}
}
