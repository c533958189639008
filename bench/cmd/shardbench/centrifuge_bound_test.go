package main

import (
	"testing"

	"github.com/centrifugal/centrifuge"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// boundHandler records what the zero-cost broker hands one node.
type boundHandler struct {
	pubs          []*centrifuge.Publication
	joins, leaves []string
}

func (h *boundHandler) HandlePublication(ch string, pub *centrifuge.Publication, _ centrifuge.StreamPosition, _ bool, _ *centrifuge.Publication) error {
	h.pubs = append(h.pubs, pub)
	return nil
}
func (h *boundHandler) HandleJoin(ch string, _ *centrifuge.ClientInfo) error {
	h.joins = append(h.joins, ch)
	return nil
}
func (h *boundHandler) HandleLeave(ch string, _ *centrifuge.ClientInfo) error {
	h.leaves = append(h.leaves, ch)
	return nil
}

// The zero-cost broker hands a publication to every node, each its own
// Publication with a copy of the data the publisher may reuse; joins and
// leaves reach every node; history is refused.
func TestCentBound(t *testing.T) {
	b := &centBound{}
	h1, h2 := &boundHandler{}, &boundHandler{}
	n1, n2 := b.node(), b.node()
	require.NoError(t, n1.RegisterBrokerEventHandler(h1))
	require.NoError(t, n2.RegisterBrokerEventHandler(h2))

	data := []byte("hello")
	_, err := n1.Publish("ch", data, centrifuge.PublishOptions{})
	require.NoError(t, err)
	data[0] = 'j' // the publisher reuses its buffer
	require.Len(t, h1.pubs, 1)
	require.Len(t, h2.pubs, 1)
	assert.Equal(t, "hello", string(h1.pubs[0].Data))
	assert.NotSame(t, h1.pubs[0], h2.pubs[0], "each node gets its own Publication")
	assert.NotZero(t, h2.pubs[0].Time)

	require.NoError(t, n2.PublishJoin("ch", &centrifuge.ClientInfo{}))
	require.NoError(t, n2.PublishLeave("ch", &centrifuge.ClientInfo{}))
	assert.Equal(t, []string{"ch"}, h1.joins)
	assert.Equal(t, []string{"ch"}, h1.leaves)

	_, err = n1.Publish("ch", data, centrifuge.PublishOptions{HistorySize: 10, HistoryTTL: 1})
	assert.ErrorIs(t, err, errBoundHistory)
	_, _, err = n1.History("ch", centrifuge.HistoryOptions{})
	assert.ErrorIs(t, err, errBoundHistory)
	assert.ErrorIs(t, n1.RemoveHistory("ch"), errBoundHistory)
	assert.Len(t, h1.pubs, 1, "a refused publish reaches nobody")
}
