// Package agreement keeps the layout record and the registry of live
// brokers in Redis (see shardcast.Agreement): the join script a broker
// runs at New and then on every heartbeat, and its leave at Close. It
// knows nothing of the engines: an engine hands it a Runner that executes
// a script on the Redis that holds the keys.
package agreement

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/layoutkey"
	"github.com/shardcast/shardcast/internal/resp"
)

// HeartbeatsToExpire is how many heartbeat intervals a registration lasts
// without renewal.
const HeartbeatsToExpire = 3

// Runner runs script s with keys and args on the Redis that holds the
// record and returns its reply (string, int64, nil or []any), like the
// engines' Eval.
type Runner func(ctx context.Context, s *shardcast.Script, keys, args []string) (any, error)

// Config is what Join needs.
type Config struct {
	shardcast.Agreement // defaults applied
	// Run executes the scripts; Where names its Redis in messages, and
	// Node in events when it is one host:port.
	Run         Runner
	Where, Node string
	// Ours is the broker's layout.
	Ours shardcast.LayoutRecord
	// Timeout bounds each script call.
	Timeout time.Duration
	// Emit raises the broker's events; Log gets diagnostics.
	Emit func(shardcast.Event)
	Log  *slog.Logger
}

// Member is one broker's registration. Its methods are safe on a nil
// Member, which stands for a broker with the agreement off.
type Member struct {
	cfg  Config
	id   string
	keys []string

	// quit ends the heartbeat, and cuts short a renewal in flight; beat
	// counts the running heartbeat loop.
	quit context.Context
	stop context.CancelFunc
	beat sync.WaitGroup
	// end runs Leave or Abandon, once.
	end sync.Once

	// ours is the layout the broker registers with: cfg.Ours until an
	// online re-layout moves the broker (SetLayout).
	mu   sync.Mutex
	ours shardcast.LayoutRecord
}

// Join checks the broker's layout against the record and registers the
// broker. It returns a nil Member and no error when cfg.Off is set; an
// error wrapping shardcast.ErrLayoutMismatch (a *LayoutMismatchError) when
// the record holds another layout that live brokers use; any other error
// when the script could not run, bounded by cfg.Timeout.
func Join(ctx context.Context, cfg Config) (*Member, error) {
	if cfg.Off {
		return nil, nil
	}
	m := &Member{
		cfg:  cfg,
		id:   newID(),
		keys: []string{cfg.RecordKey(), layoutkey.Registry(cfg.Agreement), layoutkey.Transition(cfg.Agreement)},
	}
	m.ours = cfg.Ours
	m.quit, m.stop = context.WithCancel(context.Background())
	wrote, err := m.join(ctx)
	if err != nil {
		if se, ok := Refused(err); ok {
			cfg.Log.Warn("shardcast: layout record off: the server refused its script, so this broker's layout "+
				"is not checked against the other brokers'; grant the user the record's commands on "+
				cfg.Agreement.App+"{7lw}:shardcast-layout:* (docs/LAYOUT.md, The layout record), "+
				"or set Agreement.Off to run without the record and silence this",
				"key", m.keys[0], "on", cfg.Where, "err", se.Msg)
			return nil, nil
		}
		return nil, err
	}
	ours := m.Layout()
	switch {
	case wrote:
		cfg.Log.Info("shardcast: wrote the layout record", "key", m.keys[0], "on", cfg.Where,
			"fingerprint", ours.Fingerprint, "layout", ours.Description)
	case ours.Fingerprint != cfg.Ours.Fingerprint:
		cfg.Log.Info("shardcast: joined the layout record, which names the same instances otherwise",
			"key", m.keys[0], "on", cfg.Where, "recorded", ours.Description, "configured", cfg.Ours.Description)
	case len(ours.InstanceIDs) > 0:
		m.refreshIDs(ctx)
	}
	return m, nil
}

// Refused reports whether err is, or wraps, the server's refusal of a
// command for want of permission (NOPERM: an ACL that does not allow
// scripts, or their keys), and returns the refusal.
func Refused(err error) (*resp.ServerError, bool) {
	se, ok := resp.IsServerError(err)
	return se, ok && strings.Contains(se.Msg, "NOPERM")
}

// refreshIDs records in the record the instance ids the broker read, when
// the record holds its layout (see refreshIDsScript). A failure is only
// logged: the record keeps the ids it had, and brokers that name the
// instances as it does are not affected.
func (m *Member) refreshIDs(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()
	ours := m.Layout()
	if _, err := m.cfg.Run(ctx, refreshIDsScript, m.keys[:1], []string{ours.Fingerprint, strings.Join(ours.InstanceIDs, "\n")}); err != nil {
		m.cfg.Log.Info("shardcast: could not record the instance ids in the layout record", "key", m.keys[0], "on", m.cfg.Where, "err", err)
	}
}

// ID returns the broker's registry member: host name, process id and a
// random suffix.
func (m *Member) ID() string {
	if m == nil {
		return ""
	}
	return m.id
}

// SetLayout makes the broker register with layout r from its next
// heartbeat on: an online re-layout moved it there.
func (m *Member) SetLayout(r shardcast.LayoutRecord) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.ours = r
	m.mu.Unlock()
}

// Layout returns the layout the broker registers with.
func (m *Member) Layout() shardcast.LayoutRecord {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ours
}

// join runs the join script once and reports whether it wrote the record.
func (m *Member) join(ctx context.Context) (wrote bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()
	ttl := m.cfg.Heartbeat * HeartbeatsToExpire
	ours := m.Layout()
	args := append([]string{m.id, strconv.FormatInt(ttl.Milliseconds(), 10), ours.Fingerprint}, recordFields(ours)...)
	v, err := m.cfg.Run(ctx, joinScript, m.keys, args)
	if err != nil {
		return false, fmt.Errorf("shardcast: layout record %s on %s: %w", m.keys[0], m.cfg.Where, err)
	}
	reply, ok := v.([]any)
	if !ok || len(reply) < 2 {
		return false, fmt.Errorf("shardcast: layout record %s on %s: unexpected reply %v", m.keys[0], m.cfg.Where, v)
	}
	switch reply[0] {
	case "joined":
		return false, nil
	case "wrote":
		return true, nil
	case "mismatch":
		if len(reply) == 4 {
			others, _ := reply[1].(int64)
			recorded := parseRecord(pairs(reply[3]))
			if sameInstances(ours, recorded) && ours.Fingerprint != recorded.Fingerprint {
				// The same instances, in the same order, under other
				// names: the broker routes as the record's brokers do
				// and registers under the record's layout, which a
				// heartbeat then writes again should Redis lose it.
				m.SetLayout(recorded)
				return m.join(ctx)
			}
			return false, &shardcast.LayoutMismatchError{
				Ours:     ours,
				Recorded: recorded,
				Where:    m.cfg.Where,
				Key:      m.keys[0],
				Live:     int(others),
				Brokers:  strs(reply[2]),
			}
		}
	}
	return false, fmt.Errorf("shardcast: layout record %s on %s: unexpected reply %v", m.keys[0], m.cfg.Where, v)
}

// Start runs the heartbeat on a goroutine of run's, which must run f
// (the engines pass their core's Go, so that Close waits for it): it
// renews the registration every cfg.Heartbeat until ctx ends or Leave or
// Abandon is called. A renewal that fails, or finds the record replaced
// by another layout, raises an EventError (the latter wrapping
// ErrLayoutMismatch) and is tried again at the next beat; the broker
// keeps running either way.
func (m *Member) Start(ctx context.Context, run func(f func())) {
	if m == nil {
		return
	}
	m.beat.Add(1)
	run(func() {
		defer m.beat.Done()
		m.heartbeat(ctx)
	})
}

func (m *Member) heartbeat(parent context.Context) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	defer context.AfterFunc(m.quit, cancel)()
	tick := time.NewTicker(m.cfg.Heartbeat)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		wrote, err := m.join(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
			return // Close cut the call short
		case err != nil:
			// The event is the report, logged with its cause by the
			// broker's emitter.
			m.cfg.Emit(shardcast.Event{Kind: shardcast.EventError, Shard: m.cfg.Node, Since: time.Now(),
				Err: fmt.Errorf("layout heartbeat: %w", err)})
		case wrote:
			m.cfg.Log.Warn("shardcast: the layout record was gone; wrote it again", "key", m.keys[0], "on", m.cfg.Where)
		}
	}
}

// Leave stops the heartbeat and waits for it, then removes the broker from
// the registry, so that brokers with another layout may start as soon as
// every broker of this one has left. It tries for at most cfg.Timeout,
// one heartbeat interval or a second, whichever is shortest: a broker that cannot
// leave is dropped 3 intervals after its last renewal anyway, and Close
// should not wait out an outage. Call it
// while the Runner still works (before the engine closes). Only the first
// call of Leave or Abandon does anything, and concurrent ones wait for
// it; a failure is logged, and the registration then expires by itself.
func (m *Member) Leave() {
	if m == nil {
		return
	}
	m.end.Do(func() {
		m.halt()
		ctx, cancel := context.WithTimeout(context.Background(), min(m.cfg.Timeout, m.cfg.Heartbeat, maxLeave))
		defer cancel()
		if _, err := m.cfg.Run(ctx, leaveScript, m.keys, []string{m.id}); err != nil {
			m.cfg.Log.Warn("shardcast: could not leave the layout registry; the registration will expire",
				"key", m.keys[1], "on", m.cfg.Where, "err", err)
		}
	})
}

// maxLeave bounds Leave, so that a Close against a frozen server returns
// promptly; the registration expires by itself anyway.
const maxLeave = time.Second

// Abandon stops the heartbeat and makes Leave do nothing, leaving the
// registration to expire: what a broker that crashed leaves behind. It is
// for tests.
func (m *Member) Abandon() {
	if m != nil {
		m.end.Do(m.halt)
	}
}

// halt stops the heartbeat and waits for it.
func (m *Member) halt() {
	m.stop()
	m.beat.Wait()
}

// State is what Read finds in Redis.
type State struct {
	// Now is the server's time when it read them.
	Now time.Time
	// Record is the layout record, or nil when there is none.
	Record *shardcast.LayoutRecord
	// Brokers maps each live broker to the server time its registration
	// expires at.
	Brokers map[string]time.Time
}

// Read returns the record and the live brokers of a, through run, without
// changing anything.
func Read(ctx context.Context, run Runner, a shardcast.Agreement) (State, error) {
	v, err := run(ctx, readScript, []string{a.RecordKey(), layoutkey.Registry(a)}, nil)
	if err != nil {
		return State{}, fmt.Errorf("shardcast: read layout record %s: %w", a.RecordKey(), err)
	}
	reply, ok := v.([]any)
	if !ok || len(reply) != 3 {
		return State{}, fmt.Errorf("shardcast: read layout record %s: unexpected reply %v", a.RecordKey(), v)
	}
	var st State
	now, _ := reply[0].(int64)
	st.Now = time.UnixMilli(now)
	if fields := pairs(reply[1]); len(fields) > 0 {
		r := parseRecord(fields)
		st.Record = &r
	}
	st.Brokers = make(map[string]time.Time)
	for id, score := range pairs(reply[2]) {
		ms, _ := strconv.ParseInt(score, 10, 64)
		st.Brokers[id] = time.UnixMilli(ms)
	}
	return st, nil
}

// recordFields returns the record's field/value pairs besides version,
// fingerprint, written_by and written_at, which the script sets.
func recordFields(r shardcast.LayoutRecord) []string {
	f := []string{"description", r.Description, "engine", r.Engine}
	if r.Engine == "cluster" {
		f = append(f, "partitions", strconv.Itoa(r.Partitions), "prefix", r.Prefix)
	}
	if r.Instances != nil {
		f = append(f, "instances", strings.Join(r.Instances, "\n"))
	}
	if r.InstanceIDs != nil {
		f = append(f, "instance_ids", strings.Join(r.InstanceIDs, "\n"))
	}
	if len(r.Sentinels) > 0 {
		f = append(f, "sentinels", formatSentinels(r.Sentinels))
	}
	return f
}

// parseRecord reads a record from its fields. Unknown fields are ignored,
// missing ones left zero: a record written by a later version still
// reports its fingerprint and description.
func parseRecord(f map[string]string) shardcast.LayoutRecord {
	r := shardcast.LayoutRecord{
		Fingerprint: f["fingerprint"],
		Description: f["description"],
		Engine:      f["engine"],
		Prefix:      f["prefix"],
	}
	r.Partitions, _ = strconv.Atoi(f["partitions"])
	if s, ok := f["instances"]; ok && s != "" {
		r.Instances = strings.Split(s, "\n")
	}
	if s, ok := f["instance_ids"]; ok && s != "" {
		r.InstanceIDs = strings.Split(s, "\n")
	}
	r.Sentinels = parseSentinels(f["sentinels"])
	return r
}

// pairs reads a flat field, value, ... array into a map.
func pairs(v any) map[string]string {
	a, _ := v.([]any)
	out := make(map[string]string, len(a)/2)
	for i := 0; i+1 < len(a); i += 2 {
		k, _ := a[i].(string)
		val, _ := a[i+1].(string)
		out[k] = val
	}
	return out
}

func strs(v any) []string {
	a, _ := v.([]any)
	out := make([]string, 0, len(a))
	for _, x := range a {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// newID names a broker in the registry so that an operator can find it:
// host name, process id and 6 random bytes.
func newID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	return host + "/" + strconv.Itoa(os.Getpid()) + "/" + hex.EncodeToString(b[:])
}
