package agreement

import (
	"errors"
	"fmt"

	"github.com/shardcast/shardcast"
)

// followTries bounds how often Follow adopts a record and builds again:
// each try after the first follows a record that changed while the
// previous one was built (a coordinated restart into another layout).
const followTries = 3

// Follow builds a broker from cfg with build. When follow is set and
// build fails because the running brokers' record holds another layout
// (a *shardcast.LayoutMismatchError), it rewrites cfg to that layout with
// adopt and builds again, so that the broker joins the fleet on the
// recorded layout rather than failing (shardcast.Agreement.Follow). It
// returns the broker and the layout it adopted (nil when cfg's own layout
// was taken). An adopt error, such as a record of the other engine, is
// returned wrapped together with the mismatch.
func Follow[C, B any](cfg C, follow bool, build func(C) (B, error),
	adopt func(C, shardcast.LayoutRecord) (C, error)) (B, *shardcast.LayoutRecord, error) {
	b, err := build(cfg)
	if err == nil || !follow {
		return b, nil, err
	}
	var adopted *shardcast.LayoutRecord
	for range followTries {
		var mm *shardcast.LayoutMismatchError
		if !errors.As(err, &mm) {
			return b, nil, err
		}
		next, aerr := adopt(cfg, mm.Recorded)
		if aerr != nil {
			return b, nil, fmt.Errorf("shardcast: Agreement.Follow cannot adopt the recorded layout %s (%s): %w; %w",
				mm.Recorded.Fingerprint, mm.Recorded.Description, aerr, err)
		}
		rec := mm.Recorded
		adopted = &rec
		if b, err = build(next); err == nil {
			return b, adopted, nil
		}
		if !errors.As(err, &mm) {
			return b, nil, fmt.Errorf("shardcast: following the recorded layout %s (%s): %w",
				rec.Fingerprint, rec.Description, err)
		}
	}
	return b, nil, fmt.Errorf("shardcast: Agreement.Follow: the layout record changed %d times while the broker started: %w",
		followTries, err)
}
