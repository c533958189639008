package agreement

import (
	"context"
	"maps"
	"slices"

	"github.com/shardcast/shardcast"
)

// ReadStatus reads a's record, its live brokers and the re-layout under
// way through run, without changing anything: what sharded.ReadLayout and
// cluster.ReadLayout return. It makes two reads (Read, then
// ReadTransition), so a re-layout that finishes between them may show
// the new record and no transition, or the old one with it.
func ReadStatus(ctx context.Context, run Runner, a shardcast.Agreement) (shardcast.LayoutStatus, error) {
	rec, err := Read(ctx, run, a)
	if err != nil {
		return shardcast.LayoutStatus{}, err
	}
	st, err := ReadTransition(ctx, run, a)
	if err != nil {
		return shardcast.LayoutStatus{}, err
	}
	out := shardcast.LayoutStatus{Record: rec.Record, Brokers: slices.Sorted(maps.Keys(rec.Brokers))}
	if t := st.T; t != nil {
		out.Relayout = &shardcast.RelayoutStatus{ID: t.ID, Phase: t.Phase, To: t.ToRecord,
			Coordinator: t.Coordinator, StartedAt: t.StartedAt, PhaseAt: t.PhaseAt}
	}
	return out, nil
}
