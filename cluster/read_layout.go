package cluster

import (
	"context"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/agreement"
)

// ReadLayout reads the layout record of the application a names from the
// cluster the seed nodes addrs belong to (in the form of Config.Addrs),
// on the master of the record's slot, with its live brokers and the
// online re-layout under way, and changes nothing: what an operator's
// tool shows of a running fleet, such as the partition count and prefix
// its brokers route by. conn says how to reach the nodes; each read is
// bounded by conn.CommandTimeout.
//
// An application with no record there is no error: Record is nil. It
// fails with shardcast.ErrInvalidConfig for an Agreement or address the
// brokers could not have used, and otherwise when no seed answers, no
// master serves the record's slot, or the master refuses the scripts (a
// user without the permission to run them).
func ReadLayout(ctx context.Context, addrs []string, conn shardcast.ConnOptions, a shardcast.Agreement) (shardcast.LayoutStatus, error) {
	if err := a.Validate(); err != nil {
		return shardcast.LayoutStatus{}, err
	}
	c, err := openCoordinator(RelayoutConfig{Addrs: addrs, Conn: conn})
	if err != nil {
		return shardcast.LayoutStatus{}, err
	}
	defer c.Close()
	return agreement.ReadStatus(ctx, c.Run, a)
}
