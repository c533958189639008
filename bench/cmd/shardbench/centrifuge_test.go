package main

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Every channel reaches -cent-fanout clients on as many different nodes,
// and every client subscribes to something when there are enough
// subscriptions to go round.
func TestCentChannelsSpreadSubscribersOverNodes(t *testing.T) {
	saved := cfg
	defer func() { cfg = saved }()
	for _, c := range []struct{ nodes, perNode, channels, fanout int }{
		{3, 20, 120, 3}, {3, 20, 120, 2}, {4, 25, 50, 4}, {2, 1, 5, 2},
	} {
		t.Run(fmt.Sprint(c), func(t *testing.T) {
			cfg.centNodes, cfg.centClients, cfg.centChannels, cfg.centFanout = c.nodes, c.perNode, c.channels, c.fanout
			clients := c.nodes * c.perNode
			subs := centChannels("ch", clients)
			subscribers := map[string][]int{}
			for i, chs := range subs {
				if c.channels*c.fanout >= clients {
					assert.NotEmpty(t, chs, "client %d", i)
				}
				for _, ch := range chs {
					subscribers[ch] = append(subscribers[ch], i)
				}
			}
			assert.Len(t, subscribers, c.channels)
			for ch := range c.channels {
				nodes := map[int]bool{}
				for _, i := range subscribers["ch"+strconv.Itoa(ch)] {
					nodes[i%c.nodes] = true
				}
				assert.Len(t, nodes, c.fanout, "channel %d", ch)
			}
		})
	}
}

func TestPublishCmd(t *testing.T) {
	assert.True(t, publishCmd("id=1 addr=x sub=0 ssub=0 cmd=spublish user=default"))
	assert.True(t, publishCmd("id=1 addr=x sub=0 ssub=0 cmd=evalsha user=default"))
	// A publishing connection also polls the slot map and checks ROLE.
	assert.True(t, publishCmd("id=1 addr=x sub=0 ssub=0 cmd=cluster|slots user=default"))
	assert.True(t, publishCmd("id=1 addr=x sub=0 ssub=0 cmd=role user=default"))
	assert.False(t, publishCmd("id=1 addr=x sub=0 ssub=0 cmd=publishx user=default"))
	assert.False(t, publishCmd("id=1 addr=x sub=0 ssub=0 cmd=NULL user=default"))
	assert.False(t, publishCmd("id=1 addr=x sub=0 ssub=0 cmd=cluster|nodes user=default"))
}

// -cent-history on adds one server-path run with history after the runs
// without; the client path never runs with history.
func TestCentVariants(t *testing.T) {
	cases := []struct {
		publish, history string
		want             []centVariant
		err              bool
	}{
		{"server,client", "off,on", []centVariant{{"server", false}, {"client", false}, {"server", true}}, false},
		{"server,client", "both", []centVariant{{"server", false}, {"client", false}, {"server", true}}, false},
		{"server", "off", []centVariant{{"server", false}}, false},
		{"client", "on", []centVariant{{"server", true}}, false},
		{"server", "maybe", nil, true},
		{"socket", "off", nil, true},
		{"", "off", nil, true},
	}
	for _, c := range cases {
		t.Run(c.publish+"/"+c.history, func(t *testing.T) {
			got, err := centVariants(c.publish, c.history)
			if c.err {
				assert.Error(t, err)
				return
			}
			assert.NoError(t, err)
			assert.Equal(t, c.want, got)
		})
	}
}
