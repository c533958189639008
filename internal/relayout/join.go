package relayout

import "github.com/shardcast/shardcast/internal/agreement"

// Join checks the broker's layout against its application's layout record
// and registers the broker (agreement.Join: reg names where the record is
// and the broker's layout; the agreement, the scripts' runner and timeout,
// the events and the log come from cfg), with a heartbeat on cfg.Core
// until the broker closes. It returns the registration and the follower of
// the broker's re-layouts, which the broker starts once it is built; both
// are nil with the agreement off, or turned off because the server refused
// its scripts (agreement.Join logged why).
func Join(cfg FollowerConfig, reg agreement.Config) (*agreement.Member, *Follower, error) {
	reg.Agreement, reg.Run, reg.Timeout = cfg.Agreement, cfg.Run, cfg.Timeout
	reg.Emit, reg.Log = cfg.Core.Emitter.Emit, cfg.Core.Log
	m, err := agreement.Join(cfg.Core.Ctx(), reg)
	if err != nil || m == nil {
		return nil, nil, err // m is nil without error when the server refused the record
	}
	cfg.Member = m
	f := newFollower(cfg)
	m.Start(cfg.Core.Ctx(), cfg.Core.Go)
	return m, f, nil
}
