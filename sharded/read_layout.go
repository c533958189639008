package sharded

import (
	"context"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/agreement"
)

// ReadLayout reads the layout record of the application a names from
// the instance that holds it, controlAddr (the brokers'
// Config.ControlAddr, or their first address, in the form of
// Config.Addrs), with its live brokers and the online re-layout under
// way, and changes nothing: what an operator's tool shows of a running
// fleet, such as the instance list its brokers route by. conn says how
// to reach the instance; each read is bounded by conn.CommandTimeout.
//
// An application with no record there is no error: Record is nil. It
// fails with shardcast.ErrInvalidConfig for an Agreement or address the
// brokers could not have used, and otherwise when the instance cannot be
// reached or refuses the scripts (a user without the permission to run
// them).
func ReadLayout(ctx context.Context, controlAddr string, conn shardcast.ConnOptions, a shardcast.Agreement) (shardcast.LayoutStatus, error) {
	if err := a.Validate(); err != nil {
		return shardcast.LayoutStatus{}, err
	}
	c, err := openCoordinator(ctx, RelayoutConfig{ControlAddr: controlAddr, Conn: conn})
	if err != nil {
		return shardcast.LayoutStatus{}, err
	}
	defer c.Close()
	return agreement.ReadStatus(ctx, c.Run, a)
}
