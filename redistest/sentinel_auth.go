package redistest

import (
	"context"
	"fmt"
)

// RequirePassword makes every Sentinel refuse clients that do not log in
// as user with password: it adds that ACL user (every command and
// channel), has the Sentinels log in to each other as it (sentinel-user,
// sentinel-pass), and turns the default user off. The harness's own
// connections to the Sentinels log in from then on. It is for tests of
// clients that must authenticate to Sentinel; a Sentinel restarted
// afterwards keeps the setting only as far as it rewrote its config.
func (s *Sentinels) RequirePassword(ctx context.Context, user, password string) error {
	for _, srv := range s.nodes {
		if err := srv.doAll(ctx,
			[]string{"ACL", "SETUSER", user, "on", ">" + password, "+@all", "~*", "&*"},
			[]string{"SENTINEL", "CONFIG", "SET", "sentinel-user", user},
			[]string{"SENTINEL", "CONFIG", "SET", "sentinel-pass", password}); err != nil {
			return fmt.Errorf("redistest: sentinel password: %w", err)
		}
	}
	for _, srv := range s.nodes {
		srv.login.Store(&[]string{"AUTH", user, password})
		if err := srv.doAll(ctx, []string{"ACL", "SETUSER", "default", "off"}); err != nil {
			return fmt.Errorf("redistest: sentinel password: %w", err)
		}
	}
	return nil
}
