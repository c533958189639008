package redistest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ErrNoAtomicMigration is returned by StartAtomicMigration on a server
// without CLUSTER MIGRATESLOTS (all but Valkey 9.0 and later).
var ErrNoAtomicMigration = errors.New("redistest: the server has no atomic slot migration (CLUSTER MIGRATESLOTS)")

// SlotMigration is an atomic slot migration (Valkey 9's CLUSTER
// MIGRATESLOTS): the source streams the slots' keys to the target, which
// takes ownership of them in one step at the end. Unlike MoveSlots there is
// no MIGRATING/IMPORTING phase a client sees: until the flip the source
// serves the slots as before, then it answers MOVED.
type SlotMigration struct {
	c           *Cluster
	From, To    *Server
	First, Last uint16
	// Name is the server's name of the job (CLUSTER GETSLOTMIGRATIONS).
	Name string
	// FirstState is the job's state when the source first listed it,
	// right after it took the command.
	FirstState string
}

// HasAtomicMigration tells whether s knows CLUSTER MIGRATESLOTS.
func (s *Server) HasAtomicMigration(ctx context.Context) (bool, error) {
	v, err := s.Do(ctx, "CLUSTER", "HELP")
	if err != nil {
		return false, err
	}
	lines, _ := v.([]any)
	for _, l := range lines {
		if t, ok := l.(string); ok && strings.HasPrefix(t, "MIGRATESLOTS ") {
			return true, nil
		}
	}
	return false, nil
}

// StartAtomicMigration asks the master of slots first..last (one master
// must own them all) to migrate them to master to with CLUSTER
// MIGRATESLOTS, and returns once the server has taken the job; Wait
// follows it to the end, Cancel stops it.
func (c *Cluster) StartAtomicMigration(ctx context.Context, first, last uint16, to *Server) (*SlotMigration, error) {
	if first > last || last >= SlotCount {
		return nil, fmt.Errorf("redistest: bad slot range %d-%d", first, last)
	}
	if !c.isMember(to) {
		return nil, ErrNotMember
	}
	from, err := c.MasterOfSlot(ctx, first)
	if err != nil {
		return nil, err
	}
	for slot := first + 1; slot <= last && slot > first; slot++ {
		o, err := c.MasterOfSlot(ctx, slot)
		if err != nil {
			return nil, err
		}
		if o != from {
			return nil, fmt.Errorf("redistest: slots %d-%d have two owners, %s and %s", first, last, from.Addr(), o.Addr())
		}
	}
	if ok, err := from.HasAtomicMigration(ctx); err != nil {
		return nil, err
	} else if !ok {
		return nil, ErrNoAtomicMigration
	}
	before, err := migrations(ctx, from)
	if err != nil {
		return nil, err
	}
	rng := fmt.Sprintf("%d-%d", first, last)
	if _, err := from.Do(ctx, "CLUSTER", "MIGRATESLOTS", "SLOTSRANGE", strconv.Itoa(int(first)), strconv.Itoa(int(last)), "NODE", to.ID()); err != nil {
		return nil, fmt.Errorf("redistest: CLUSTER MIGRATESLOTS %s to %s on %s: %w", rng, to.Addr(), from.Addr(), err)
	}
	m := &SlotMigration{c: c, From: from, To: to, First: first, Last: last}
	// The job is the source's new EXPORT entry for this range.
	after, err := migrations(ctx, from)
	if err != nil {
		return nil, err
	}
	for _, j := range after {
		if j["operation"] == "EXPORT" && j["slot_ranges"] == rng && j["target_node"] == to.ID() &&
			!slices.ContainsFunc(before, func(b map[string]string) bool { return b["name"] == j["name"] }) {
			m.Name, m.FirstState = j["name"], j["state"]
		}
	}
	if m.Name == "" {
		return nil, fmt.Errorf("redistest: %s took MIGRATESLOTS %s but lists no new job for it", from.Addr(), rng)
	}
	return m, nil
}

// MigrateSlotsAtomic migrates slots first..last to master to with CLUSTER
// MIGRATESLOTS and waits as Wait does.
func (c *Cluster) MigrateSlotsAtomic(ctx context.Context, first, last uint16, to *Server) error {
	m, err := c.StartAtomicMigration(ctx, first, last, to)
	if err != nil {
		return err
	}
	return m.Wait(ctx)
}

// State returns the job's state as the source reports it (for example
// "success", "failed" or "cancelled" once it ended) and its message.
func (m *SlotMigration) State(ctx context.Context) (state, message string, err error) {
	jobs, err := migrations(ctx, m.From)
	if err != nil {
		return "", "", err
	}
	for _, j := range jobs {
		if j["name"] == m.Name {
			return j["state"], j["message"], nil
		}
	}
	return "", "", fmt.Errorf("redistest: %s no longer lists migration %s", m.From.Addr(), m.Name)
}

// Wait waits until the job succeeded and every node agrees that the
// target owns the slots (and the cluster converged as in WaitConverged).
// A job that ended otherwise is an error naming its state.
func (m *SlotMigration) Wait(ctx context.Context) error {
	var ended error // a job that ended otherwise stops the wait at once
	err := poll(ctx, func(ctx context.Context) error {
		state, msg, err := m.State(ctx)
		switch {
		case err != nil:
			return err
		case state == "success":
			return nil
		case isEnded(state):
			ended = fmt.Errorf("redistest: migration of slots %d-%d to %s ended %s: %s", m.First, m.Last, m.To.Addr(), state, msg)
			return nil
		}
		return fmt.Errorf("migration %s: %s", m.Name, state)
	})
	if err != nil {
		return fmt.Errorf("redistest: migration of slots %d-%d to %s: %w", m.First, m.Last, m.To.Addr(), err)
	}
	if ended != nil {
		return ended
	}
	return m.c.waitConverged(ctx, func(a []slotOwner) error {
		for slot := int(m.First); slot <= int(m.Last); slot++ {
			if owner := ownerOf(a, uint16(slot)); owner != m.To.ID() {
				return fmt.Errorf("slot %d still owned by %q", slot, owner)
			}
		}
		return nil
	})
}

// Cancel cancels every migration the source runs (CLUSTER
// CANCELSLOTMIGRATIONS; Valkey 9.1.2 takes no argument, though its CLUSTER
// HELP shows one, ALL), waits until this one ended and returns its state:
// "cancelled" if it was cut short, "success" if it had finished.
func (m *SlotMigration) Cancel(ctx context.Context) (string, error) {
	if _, err := m.From.Do(ctx, "CLUSTER", "CANCELSLOTMIGRATIONS"); err != nil {
		// Also the answer when the job had ended already.
		if !strings.Contains(err.Error(), "No migrations ongoing") {
			return "", err
		}
	}
	var state string
	err := poll(ctx, func(ctx context.Context) error {
		s, _, err := m.State(ctx)
		if err != nil {
			return err
		}
		if state = s; !isEnded(s) && s != "success" {
			return fmt.Errorf("migration %s: %s", m.Name, s)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("redistest: cancel migration of slots %d-%d: %w", m.First, m.Last, err)
	}
	return state, m.c.WaitConverged(ctx)
}

// isEnded tells whether a job state is final and not a success.
func isEnded(state string) bool {
	return state == "failed" || state == "cancelled" || state == "canceled"
}

// migrations returns CLUSTER GETSLOTMIGRATIONS of s, one map per job.
func migrations(ctx context.Context, s *Server) ([]map[string]string, error) {
	v, err := s.Do(ctx, "CLUSTER", "GETSLOTMIGRATIONS")
	if err != nil {
		return nil, err
	}
	jobs, _ := v.([]any)
	out := make([]map[string]string, 0, len(jobs))
	for _, j := range jobs {
		fields, _ := j.([]any)
		m := make(map[string]string, len(fields)/2)
		for i := 0; i+1 < len(fields); i += 2 {
			k, _ := fields[i].(string)
			switch v := fields[i+1].(type) {
			case string:
				m[k] = v
			case int64:
				m[k] = strconv.FormatInt(v, 10)
			}
		}
		out = append(out, m)
	}
	return out, nil
}
