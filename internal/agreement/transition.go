package agreement

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/layoutkey"
)

// An online re-layout (docs/RELAYOUT.md) keeps two more keys next to the
// record: the transition (a hash: the re-layout under way) and the acks (a
// hash: broker id → "<transition id> <phase>", the last phase each broker
// completed). The coordinator begins, advances and ends the transition;
// brokers read it on their heartbeat and acknowledge.

// Transition is the re-layout under way.
type Transition struct {
	// ID names the re-layout; Phase is one of the shardcast.Phase
	// constants.
	ID, Phase string
	// From and To are the fingerprints of the layouts it moves between;
	// ToRecord is the new layout (Fingerprint, Description, Engine, and
	// Instances or Partitions and Prefix).
	From, To string
	ToRecord shardcast.LayoutRecord
	// Barrier is the channel of the coordinator's barriers.
	Barrier string
	// Coordinator names who runs it.
	Coordinator string
	// StartedAt and PhaseAt are server times: when it began and when it
	// entered Phase; SeenAt, when its coordinator last called (begin or
	// advance; zero when the record does not say).
	StartedAt, PhaseAt, SeenAt time.Time
}

// TransitionState is a read of the transition with the live brokers.
type TransitionState struct {
	Now time.Time
	// T is nil when no re-layout is under way.
	T *Transition
	// Live lists the live brokers; Acks maps a broker to its last ack.
	Live []string
	Acks map[string]string
}

// Acked reports whether broker acknowledged phase of t.
func (s TransitionState) Acked(broker string) bool {
	return s.T != nil && s.Acks[broker] == s.T.ID+" "+s.T.Phase
}

func transitionKeys(a shardcast.Agreement) []string {
	return []string{a.RecordKey(), layoutkey.Registry(a), layoutkey.Transition(a), layoutkey.Acks(a)}
}

// ReadTransition returns the transition, the live brokers and their acks.
func ReadTransition(ctx context.Context, run Runner, a shardcast.Agreement) (TransitionState, error) {
	v, err := run(ctx, stateScript, transitionKeys(a), nil)
	if err != nil {
		return TransitionState{}, fmt.Errorf("shardcast: read re-layout %s: %w", layoutkey.Transition(a), err)
	}
	reply, ok := v.([]any)
	if !ok || len(reply) != 4 {
		return TransitionState{}, fmt.Errorf("shardcast: read re-layout %s: unexpected reply %v", layoutkey.Transition(a), v)
	}
	now, _ := reply[0].(int64)
	st := TransitionState{Now: time.UnixMilli(now), Live: strs(reply[2]), Acks: pairs(reply[3])}
	st.T = parseTransition(pairs(reply[1]))
	return st, nil
}

func parseTransition(f map[string]string) *Transition {
	if f["id"] == "" {
		return nil
	}
	t := &Transition{
		ID: f["id"], Phase: f["phase"], From: f["from"], To: f["to"],
		Barrier: f["barrier"], Coordinator: f["coordinator"],
		ToRecord: shardcast.LayoutRecord{
			Fingerprint: f["to"], Description: f["to_description"], Engine: f["to_engine"],
		},
	}
	t.ToRecord.Prefix = f["to_prefix"]
	t.ToRecord.Partitions, _ = strconv.Atoi(f["to_partitions"])
	if s := f["to_instances"]; s != "" {
		t.ToRecord.Instances = strings.Split(s, "\n")
	}
	t.ToRecord.Sentinels = parseSentinels(f["to_sentinels"])
	ms, _ := strconv.ParseInt(f["started_at"], 10, 64)
	t.StartedAt = time.UnixMilli(ms)
	ms, _ = strconv.ParseInt(f["phase_at"], 10, 64)
	t.PhaseAt = time.UnixMilli(ms)
	if ms, err := strconv.ParseInt(f["seen_at"], 10, 64); err == nil {
		t.SeenAt = time.UnixMilli(ms)
	}
	return t
}

// BeginResult is what Begin found.
type BeginResult struct {
	// Begun is set when Begin wrote a new transition; otherwise Current is
	// the one already under way (nil with an error).
	Begun   bool
	Current *Transition
	// From is the record's layout.
	From shardcast.LayoutRecord
	// Live counts the live brokers.
	Live int
}

// Begin starts re-layout id to layout to, unless one is under way (then
// it returns it in Current). It fails with shardcast.ErrNoLayoutRecord
// when there is no record and shardcast.ErrSameLayout when the record
// already holds to.
func Begin(ctx context.Context, run Runner, a shardcast.Agreement, id, coordinator string, to shardcast.LayoutRecord) (BeginResult, error) {
	args := []string{id, coordinator, to.Fingerprint, to.Description, to.Engine,
		strings.Join(to.Instances, "\n"), layoutkey.Barrier(a, id), strconv.Itoa(to.Partitions), to.Prefix, formatSentinels(to.Sentinels)}
	v, err := run(ctx, beginScript, transitionKeys(a), args)
	if err != nil {
		// The script may have run with its reply lost.
		return BeginResult{}, fmt.Errorf("shardcast: begin re-layout in %s (it may have begun: run it again to resume it, or abort it): %w", layoutkey.Transition(a), err)
	}
	reply, _ := v.([]any)
	if len(reply) < 1 {
		return BeginResult{}, fmt.Errorf("shardcast: begin re-layout: unexpected reply %v", v)
	}
	var res BeginResult
	if len(reply) >= 3 {
		res.From = parseRecord(pairs(reply[1]))
		n, _ := reply[2].(int64)
		res.Live = int(n)
	}
	switch reply[0] {
	case "norecord":
		return res, fmt.Errorf("%w in %s (App %q)", shardcast.ErrNoLayoutRecord, a.RecordKey(), a.App)
	case "same":
		return res, fmt.Errorf("%w: %s (%s)", shardcast.ErrSameLayout, to.Fingerprint, to.Description)
	case "busy":
		if len(reply) >= 4 {
			res.Current = parseTransition(pairs(reply[3]))
		}
		return res, nil
	case "begun":
		res.Begun = true
		return res, nil
	}
	return res, fmt.Errorf("shardcast: begin re-layout: unexpected reply %v", v)
}

// Ack records that broker completed phase of transition id. It reports
// false when the transition is no longer in that phase.
func Ack(ctx context.Context, run Runner, a shardcast.Agreement, broker, id, phase string) (bool, error) {
	v, err := run(ctx, ackScript, transitionKeys(a), []string{broker, id, phase})
	if err != nil {
		return false, fmt.Errorf("shardcast: acknowledge re-layout %s %s: %w", id, phase, err)
	}
	n, _ := v.(int64)
	return n == 1, nil
}

// AdvanceResult is what Advance found.
type AdvanceResult struct {
	// Advanced is set once the transition is in the phase asked for
	// (also when an earlier call moved it there and its reply was lost),
	// or gone when "done" was asked for.
	Advanced bool
	// Waiting lists the live brokers that have not acknowledged yet.
	Waiting []string
	// Refilling is how long the registry is still given to refill after a
	// gap in the coordinator's calls (the control instance was down or
	// frozen): until then nobody is pruned and nothing advances.
	Refilling time.Duration
	// NoBroker is set when no broker is live and the caller did not allow
	// advancing without one.
	NoBroker bool
}

// Advance moves transition t from phase from to phase to, if every live
// broker acknowledged from; "done" deletes the transition. Moving to
// shardcast.PhaseFinish also writes the new layout as the record.
//
// The registry expires by the control instance's clock, so after that
// instance did not answer for a while every registration may have expired
// although the brokers live. The script therefore notes the server time
// of each call in the transition, and when the last call is more than
// HeartbeatsToExpire-1 heartbeats old, it prunes and advances nothing for
// HeartbeatsToExpire heartbeats, the time every live broker needs to
// register again. A shorter gap cannot have expired a broker that renews
// each heartbeat, and the coordinator calls every half heartbeat: a bound
// of one heartbeat took every slow poll on a loaded machine for an
// outage, and a coordinator whose polls were all slow never advanced. It never moves on to
// switch, drain or finish with no live broker unless withoutBrokers is
// set (an empty registry is more likely a registry not refilled than a
// fleet gone); abort and finish end ("done") without one, the record then
// holding the layout the transition ends on.
//
// It fails with shardcast.ErrRelayoutVanished when the transition is
// gone (another one may have begun), with shardcast.ErrRelayoutAborted
// when it was aborted, and with an error naming the phase when it is in
// another one.
func Advance(ctx context.Context, run Runner, a shardcast.Agreement, t *Transition, from, to, coordinator string, withoutBrokers bool) (AdvanceResult, error) {
	empty := "0"
	if withoutBrokers {
		empty = "1"
	}
	args := []string{t.ID, from, to, coordinator, strconv.FormatInt(a.Heartbeat.Milliseconds(), 10),
		strconv.Itoa(HeartbeatsToExpire), empty}
	if to == shardcast.PhaseFinish {
		args = append(args, recordFields(t.ToRecord)...)
	}
	v, err := run(ctx, advanceScript, transitionKeys(a), args)
	if err != nil {
		return AdvanceResult{}, fmt.Errorf("shardcast: advance re-layout %s to %s: %w", t.ID, to, err)
	}
	reply, _ := v.([]any)
	if len(reply) < 1 {
		return AdvanceResult{}, fmt.Errorf("shardcast: advance re-layout: unexpected reply %v", v)
	}
	switch reply[0] {
	case "ok":
		return AdvanceResult{Advanced: true}, nil
	case "waiting":
		return AdvanceResult{Waiting: strs(reply[1])}, nil
	case "refilling":
		ms, _ := reply[1].(int64)
		return AdvanceResult{Refilling: time.Duration(ms) * time.Millisecond}, nil
	case "nobroker":
		return AdvanceResult{NoBroker: true}, nil
	case "gone":
		if to == "done" {
			return AdvanceResult{Advanced: true}, nil // ended, by this call whose reply was lost or by another
		}
		return AdvanceResult{}, fmt.Errorf("%w: re-layout %s (%s)", shardcast.ErrRelayoutVanished, t.ID, layoutkey.Transition(a))
	case "phase":
		got, _ := reply[1].(string)
		if got == shardcast.PhaseAbort {
			return AdvanceResult{}, fmt.Errorf("%w: re-layout %s was aborted", shardcast.ErrRelayoutAborted, t.ID)
		}
		return AdvanceResult{}, fmt.Errorf("shardcast: re-layout %s is in phase %s, not %s", t.ID, got, from)
	}
	return AdvanceResult{}, fmt.Errorf("shardcast: advance re-layout: unexpected reply %v", v)
}

// Abort turns the transition (transition id, or any when id is empty)
// into an abort. It returns the aborted transition's id, or an error
// when there is none or it already began to finish.
func Abort(ctx context.Context, run Runner, a shardcast.Agreement, id string) (string, error) {
	v, err := run(ctx, abortScript, transitionKeys(a), []string{id})
	if err != nil {
		return "", fmt.Errorf("shardcast: abort re-layout: %w", err)
	}
	reply, _ := v.([]any)
	if len(reply) < 1 {
		return "", fmt.Errorf("shardcast: abort re-layout: unexpected reply %v", v)
	}
	switch reply[0] {
	case "ok":
		got, _ := reply[1].(string)
		return got, nil
	case "none":
		return "", fmt.Errorf("%w in %s", shardcast.ErrNoRelayout, layoutkey.Transition(a))
	case "other":
		got, _ := reply[1].(string)
		return "", fmt.Errorf("%w: %s, not %s", shardcast.ErrRelayoutInProgress, got, id)
	case "finishing":
		return "", fmt.Errorf("shardcast: re-layout already finishing; it cannot be aborted")
	}
	return "", fmt.Errorf("shardcast: abort re-layout: unexpected reply %v", v)
}

// The transition scripts take KEYS = [record, registry, transition, acks].

// beginScript starts a transition: ARGV = [id, coordinator, to
// fingerprint, to description, to engine, to instances, barrier channel,
// to partitions, to prefix, to sentinels] (partitions and prefix for the
// cluster engine, sentinels for the sharded engine's Sentinel shards).
var beginScript = shardcast.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local live = redis.call('ZCARD', KEYS[2])
local rec = redis.call('HGETALL', KEYS[1])
local fp = redis.call('HGET', KEYS[1], 'fingerprint')
if not fp then
  return {'norecord', rec, live}
end
local cur = redis.call('HGETALL', KEYS[3])
if #cur > 0 then
  return {'busy', rec, live, cur}
end
if fp == ARGV[3] then
  return {'same', rec, live}
end
local ts = string.format('%d', now)
redis.call('DEL', KEYS[4])
redis.call('HSET', KEYS[3], 'id', ARGV[1], 'phase', 'prepare', 'from', fp, 'to', ARGV[3],
  'to_description', ARGV[4], 'to_engine', ARGV[5], 'to_instances', ARGV[6], 'barrier', ARGV[7],
  'coordinator', ARGV[2], 'started_at', ts, 'phase_at', ts, 'seen_at', ts, 'to_partitions', ARGV[8], 'to_prefix', ARGV[9], 'to_sentinels', ARGV[10])
return {'begun', rec, live}
`)

// stateScript reads {now, transition, live brokers, acks}.
var stateScript = shardcast.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return {now, redis.call('HGETALL', KEYS[3]),
  redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. string.format('%d', now), '+inf'),
  redis.call('HGETALL', KEYS[4])}
`)

// ackScript records ARGV = [broker, id, phase] if the transition is id in
// that phase.
var ackScript = shardcast.NewScript(`
local tr = redis.call('HMGET', KEYS[3], 'id', 'phase')
if tr[1] ~= ARGV[2] or tr[2] ~= ARGV[3] then
  return 0
end
redis.call('HSET', KEYS[4], ARGV[1], ARGV[2] .. ' ' .. ARGV[3])
return 1
`)

// advanceScript moves transition ARGV[1] from phase ARGV[2] to ARGV[3]
// once every live broker acknowledged ARGV[2]; ARGV[4] is the
// coordinator, ARGV[5] the heartbeat in ms, ARGV[6] HeartbeatsToExpire,
// ARGV[7] "1" to move on with no live broker, ARGV[8..] the new record's
// field/value pairs (to finish). seen_at is the server time of the last
// begin or advance; refill_until, the end of the refill after a gap.
var advanceScript = shardcast.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local tr = redis.call('HMGET', KEYS[3], 'id', 'phase', 'to', 'seen_at', 'refill_until')
if tr[1] ~= ARGV[1] then
  return {'gone'}
end
local refill = tonumber(tr[5]) or 0
local seen = tonumber(tr[4]) or 0
if now - seen > tonumber(ARGV[5]) * math.max(1, tonumber(ARGV[6]) - 1) then
  refill = now + tonumber(ARGV[5]) * tonumber(ARGV[6])
  redis.call('HSET', KEYS[3], 'refill_until', string.format('%d', refill))
end
redis.call('HSET', KEYS[3], 'seen_at', string.format('%d', now))
if tr[2] == ARGV[3] then
  return {'ok'}
end
if tr[2] ~= ARGV[2] then
  return {'phase', tr[2]}
end
if now < refill then
  return {'refilling', refill - now}
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local live = redis.call('ZRANGE', KEYS[2], 0, -1)
if #live == 0 and ARGV[3] ~= 'done' and ARGV[7] ~= '1' then
  return {'nobroker'}
end
local want = ARGV[1] .. ' ' .. ARGV[2]
local waiting = {}
for _, b in ipairs(live) do
  if redis.call('HGET', KEYS[4], b) ~= want then
    waiting[#waiting + 1] = b
  end
end
if #waiting > 0 then
  return {'waiting', waiting}
end
if ARGV[3] == 'done' then
  redis.call('DEL', KEYS[3], KEYS[4])
  return {'ok'}
end
if ARGV[3] == 'finish' then
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'version', '1', 'fingerprint', tr[3], 'written_by', ARGV[4],
    'written_at', string.format('%d', now), unpack(ARGV, 8))
end
redis.call('HSET', KEYS[3], 'phase', ARGV[3], 'phase_at', string.format('%d', now))
return {'ok'}
`)

// abortScript turns the transition (ARGV[1], or any when empty) into an
// abort, unless it began to finish.
var abortScript = shardcast.NewScript(`
local tr = redis.call('HMGET', KEYS[3], 'id', 'phase')
if not tr[1] then
  return {'none'}
end
if ARGV[1] ~= '' and tr[1] ~= ARGV[1] then
  return {'other', tr[1]}
end
if tr[2] == 'finish' then
  return {'finishing'}
end
if tr[2] ~= 'abort' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('HSET', KEYS[3], 'phase', 'abort', 'phase_at', string.format('%d', now))
end
return {'ok', tr[1]}
`)
