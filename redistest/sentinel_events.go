package redistest

import (
	"context"
	"fmt"
	"net"
	"strings"
)

// SwitchMasterChannel is the Pub/Sub channel on which every Sentinel
// announces a completed failover (SUBSCRIBE it on a Sentinel).
const SwitchMasterChannel = "+switch-master"

// SwitchMaster is one +switch-master announcement.
type SwitchMaster struct {
	// Name is the master name; Old and New are "ip:port".
	Name, Old, New string
}

// ParseSwitchMaster reads a +switch-master message payload,
// "<name> <old-ip> <old-port> <new-ip> <new-port>".
func ParseSwitchMaster(payload string) (SwitchMaster, error) {
	f := strings.Fields(payload)
	if len(f) != 5 {
		return SwitchMaster{}, fmt.Errorf("%w: +switch-master payload %q", ErrProtocol, payload)
	}
	return SwitchMaster{Name: f[0], Old: net.JoinHostPort(f[1], f[2]), New: net.JoinHostPort(f[3], f[4])}, nil
}

// Receive reads the next reply or pushed message on a Conn that
// subscribed (Do("SUBSCRIBE", ...) returns the first confirmation):
// []any{"message", channel, payload} for a message. It waits until ctx
// ends (or defaultCallTimeout without a deadline); a timeout leaves the
// connection unusable.
func (c *Conn) Receive(ctx context.Context) (any, error) {
	return c.c.receive(ctx)
}
