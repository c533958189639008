package centrifugebroker

import (
	"strconv"

	"github.com/shardcast/shardcast"
)

// A map channel lives beside its wire channel (MapConfig.ChannelPrefix +
// channel, see keyspace) in up to five keys, and one more per idempotency
// key:
//
//	meta      hash    epoch "e" and top offset "s" of the channel's stream
//	stream    stream  the stream's publications, ids "offset-0", field "d"
//	state     hash    key → entry: offset ':' len ':' removal publication
//	expiry    zset    key, scored by when its entry expires (ms, server clock)
//	versions  hash    "v:" key → version, "e:" key → its version epoch
//	result    hash    epoch "e" and offset "s" of an idempotent call's result
//
// An entry keeps, ahead of the Protobuf Publication clients read, the
// publication of its removal (key, Removed and the entry's tags, without a
// time): a removal without tags of its own and an expiry publish it with the
// time appended, so subscribers filtering by tags get it as they got the
// entry, and no script has to parse Protobuf.
//
// Channels with a stream (recoverable and persistent modes) have an epoch.
// A script that finds the meta missing (expired after MetaTTL, cleared,
// lost with a restart) starts a new epoch and deletes whatever is left of
// the old one, state included: state and stream always belong to the
// current epoch, and a client holding an old position is told so.
// Ephemeral channels have neither stream nor epoch; their position is
// always zero.
//
// Expired entries are removed, and their removal appended and published
// like any other, by the first script that sweeps the channel: every script
// sweeps a bounded number before it works, and the MapBroker sweeps the
// channels its node is subscribed to when their entries fall due
// (mapexpiry.go).
//
// Durations are milliseconds (PEXPIRE), "0" for none.

// mapKeys is how many keys every map script gets: meta, stream, state,
// expiry, versions, result (a key of the channel's slot when unused).
const mapKeys = 6

// mapSweepPerCall bounds the expired entries one script removes before it
// works, so that a call stays cheap; the sweeper takes the rest.
const mapSweepPerCall = 100

// The meta of a channel with a stream also holds "u", when (ms, server
// clock) its state, expiry and versions keys expire, and "r", the run_id
// of the server that last ran a script on it. Every script renews the
// meta for MetaTTL, reads as well as writes, so the state keys must live
// at least as long: a state that expired under a live meta would lose its
// entries with no removal, under an epoch that goes on. A script that
// finds less than MetaTTL left before "u" moves it, and the keys' expiry,
// to twice MetaTTL from now; writes set the keys' expiry to "u". With
// Config.NewEpochOnServerChange, a meta another server process wrote (a
// failover, a restart from a snapshot, a slot migration), which may have
// lost its last writes, starts a new epoch as a missing meta does, as
// history's does (historyscripts.go).

// mapLua opens every map script: the keys, the common arguments, the
// server's time, the channel's epoch and top offset, keep, emit and sweep.
//
//	ARGV: 1 envelope header (empty in raw mode), 2 wire channel,
//	      3 "publish" or "spublish", 4 "1" for a stream, 5 stream size,
//	      6 stream TTL, 7 meta TTL (of the state too; for an ephemeral
//	      channel only the state's, see mapEphemeralGrace), 8 epoch for a
//	      new stream, then each script's own, then the last two: "1" for a
//	      new epoch on a server change, and the run_id (added by the
//	      engine)
const mapLua = `
local meta, stream, state, expiry, versions, result = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local header, wire, publish, streamed = ARGV[1], ARGV[2], ARGV[3], ARGV[4] == '1'
local size, stream_ttl, meta_ttl, new_epoch = ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local strict, run = ARGV[#ARGV - 1], ARGV[#ARGV]
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local epoch, top, state_until = '', 0, 0
if streamed then
  local m = redis.call('hmget', meta, 'e', 's', 'u', 'r')
  if m[1] and strict == '1' and run ~= '' and m[4] and m[4] ~= run then
    m = {}
  end
  if m[1] then
    epoch, top, state_until = m[1], tonumber(m[2] or '0'), tonumber(m[3] or '0')
  else
    epoch = new_epoch
    redis.call('del', meta, stream, state, expiry, versions)
    redis.call('hset', meta, 'e', epoch)
  end
  if run ~= '' and m[4] ~= run then
    redis.call('hset', meta, 'r', run)
  end
  if meta_ttl ~= '0' then
    redis.call('pexpire', meta, meta_ttl)
    if state_until < now + tonumber(meta_ttl) then
      state_until = now + 2 * tonumber(meta_ttl)
      redis.call('hset', meta, 'u', state_until)
      redis.call('pexpireat', state, state_until)
      redis.call('pexpireat', expiry, state_until)
      redis.call('pexpireat', versions, state_until)
    end
  end
end

-- keep gives the state keys their expiry after a write: the meta's "u" on
-- a stream, meta_ttl from now otherwise.
local function keep()
  if meta_ttl == '0' then return end
  if streamed then
    redis.call('pexpireat', state, state_until)
    redis.call('pexpireat', expiry, state_until)
    redis.call('pexpireat', versions, state_until)
  else
    redis.call('pexpire', state, meta_ttl)
    redis.call('pexpire', expiry, meta_ttl)
    redis.call('pexpire', versions, meta_ttl)
  end
end

-- varint is the Protobuf varint of n (< 2^53).
local function varint(n)
  local out = {}
  while n >= 128 do
    out[#out + 1] = string.char(n % 128 + 128)
    n = math.floor(n / 128)
  end
  out[#out + 1] = string.char(n)
  return table.concat(out)
end

-- entry splits a state entry into its offset, removal publication and
-- publication.
local function entry(v)
  local a = string.find(v, ':', 1, true)
  local b = string.find(v, ':', a + 1, true)
  local n = tonumber(string.sub(v, a + 1, b - 1))
  return tonumber(string.sub(v, 1, a - 1)), string.sub(v, b + 1, b + n), string.sub(v, b + n + 1)
end

-- emit gives pub the next offset, appends it to the stream and publishes
-- it, as a delta against prev if prev is not nil; it returns the offset.
local function emit(pub, prev)
  local offset = 0
  if streamed then
    offset = redis.call('hincrby', meta, 's', 1)
    top = offset
    redis.call('xadd', stream, 'MAXLEN', size, offset, 'd', pub)
    if stream_ttl ~= '0' then
      redis.call('pexpire', stream, stream_ttl)
    end
  end
  local position = offset .. ':' .. epoch .. ':'
  if prev then
    redis.call(publish, wire, header .. '\8' .. position .. #prev .. ':' .. prev .. pub)
  else
    redis.call(publish, wire, header .. '\7' .. position .. pub)
  end
  return offset
end

-- drop removes key's entry and version.
local function drop(key)
  redis.call('hdel', state, key)
  redis.call('zrem', expiry, key)
  redis.call('hdel', versions, 'v:' .. key, 'e:' .. key)
end

-- removal is the publication of the removal of an entry whose removal
-- publication is tmpl: tmpl with the time (field 9).
local function removal(tmpl)
  return tmpl .. 'H' .. varint(now)
end

-- sweep removes and emits up to max entries whose time has passed; it
-- returns how many.
local function sweep(max)
  local gone = redis.call('zrangebyscore', expiry, '-inf', now, 'LIMIT', 0, max)
  for _, key in ipairs(gone) do
    local v = redis.call('hget', state, key)
    drop(key)
    if v then
      local _, tmpl = entry(v)
      emit(removal(tmpl))
    end
  end
  return #gone
end
`

// mapPublishScript sets or removes one key of a map channel (or, without a
// key, only publishes), subject to its conditions, atomically: check,
// write, append, publish.
//
//	ARGV: 1-8 see mapLua, 9 key ("" for none), 10 Protobuf Publication
//	      (for a removal: "" to publish the entry's own removal
//	      publication), 11 removal publication of a new entry, 12 "1" to
//	      remove the key,
//	      13 key TTL, 14 result TTL ("0": no idempotency), 15 key mode
//	      ("", "if_new", "if_exists"), 16 "1" to refresh the TTL on
//	      suppress, 17 version ("0": none), 18 version epoch, 19 expected
//	      offset ("": no CAS), 20 expected epoch, 21 "1" for a delta
//
// It replies { offset, epoch, suppress reason ("" for none), entry } with
// the current entry only on a position mismatch.
var mapPublishScript = shardcast.NewScript(mapLua + `
local key, pub, tmpl, remove, key_ttl = ARGV[9], ARGV[10], ARGV[11], ARGV[12] == '1', tonumber(ARGV[13])
local result_ttl, key_mode, refresh = ARGV[14], ARGV[15], ARGV[16] == '1'
local version, version_epoch, expected_offset, expected_epoch, delta = ARGV[17], ARGV[18], ARGV[19], ARGV[20], ARGV[21] == '1'

if result_ttl ~= '0' then
  local r = redis.call('hmget', result, 'e', 's')
  if r[1] then
    return { tonumber(r[2]), r[1], 'idempotency', '' }
  end
end

sweep(` + strconv.Itoa(mapSweepPerCall) + `)

-- versions are decimal uint64 without leading zeros: compare as text, Lua
-- numbers lose precision past 2^53
local function at_least(a, b)
  if #a ~= #b then return #a > #b end
  return a >= b
end

local current = false
if key ~= '' then
  current = redis.call('hget', state, key)
  if version ~= '0' then
    local v = redis.call('hmget', versions, 'v:' .. key, 'e:' .. key)
    if v[1] and (version_epoch == '' or version_epoch == v[2]) and at_least(v[1], version) then
      return { top, epoch, 'version', '' }
    end
  end
  if not remove and key_mode == 'if_new' and current then
    if refresh and key_ttl > 0 then
      redis.call('zadd', expiry, now + key_ttl, key)
      keep()
      if streamed and stream_ttl ~= '0' then
        redis.call('pexpire', stream, stream_ttl)
      end
    end
    return { top, epoch, 'key_exists', '' }
  end
  if not remove and key_mode == 'if_exists' and not current then
    return { top, epoch, 'key_not_found', '' }
  end
  if expected_offset ~= '' then
    if expected_epoch ~= epoch or not current or entry(current) ~= tonumber(expected_offset) then
      return { top, epoch, 'position_mismatch', current or '' }
    end
  end
  if remove and not current then
    return { top, epoch, 'key_not_found', '' }
  end
end

local prev = nil
local offset
if remove then
  local _, old_tmpl = entry(current)
  drop(key)
  if pub == '' then
    offset = emit(removal(old_tmpl))
  else
    offset = emit(pub)
  end
else
  if delta and current then
    local _, _, p = entry(current)
    prev = p
  end
  offset = emit(pub, prev)
  if key ~= '' then
    redis.call('hset', state, key, offset .. ':' .. #tmpl .. ':' .. tmpl .. pub)
    if key_ttl > 0 then
      redis.call('zadd', expiry, now + key_ttl, key)
    else
      redis.call('zrem', expiry, key)
    end
    if version ~= '0' then
      redis.call('hset', versions, 'v:' .. key, version, 'e:' .. key, version_epoch)
    end
    keep()
  end
end

if result_ttl ~= '0' then
  redis.call('hset', result, 'e', epoch, 's', offset)
  redis.call('pexpire', result, result_ttl)
end
return { offset, epoch, '', '' }
`).WithRunID()

// mapReadStateScript reads a map channel's position and entries.
//
//	ARGV: 1-8 see mapLua, 9 key ("": every key), 10 cursor ("0": from the
//	      start), 11 count ("0": none, "-1": all)
//
// It replies { top offset, epoch, next cursor ("0": done), { key, entry,
// ... } }, the entries as HGETALL or HSCAN give them, not copied.
var mapReadStateScript = shardcast.NewScript(mapLua + `
local key, cursor, count = ARGV[9], ARGV[10], ARGV[11]
sweep(` + strconv.Itoa(mapSweepPerCall) + `)
if key ~= '' then
  local v = redis.call('hget', state, key)
  if v then return { top, epoch, '0', { key, v } } end
elseif count == '-1' then
  return { top, epoch, '0', redis.call('hgetall', state) }
elseif count ~= '0' then
  local r = redis.call('hscan', state, cursor, 'COUNT', count)
  return { top, epoch, r[1], r[2] }
end
return { top, epoch, '0', {} }
`).WithRunID()

// mapReadStreamScript reads a map channel's position and publications.
//
//	ARGV: 1-8 see mapLua, 9 "1" to read publications, 10 first offset
//	      ("0": from the start, or the top in reverse), 11 count ("0":
//	      all), 12 "1" for reverse
//
// It replies { top offset, epoch, entries } (entries only when asked), as
// XRANGE replies them.
var mapReadStreamScript = shardcast.NewScript(mapLua + `
local with_pubs, from, count, reverse = ARGV[9], ARGV[10], ARGV[11], ARGV[12]
sweep(` + strconv.Itoa(mapSweepPerCall) + `)
if with_pubs == '0' or not streamed then
  return { top, epoch }
end
local range
if reverse == '0' then
  range = { 'xrange', stream, from, '+' }
else
  if from == '0' then from = '+' end
  range = { 'xrevrange', stream, from, '-' }
end
if count ~= '0' then
  table.insert(range, 'COUNT')
  table.insert(range, count)
end
return { top, epoch, redis.call(unpack(range)) }
`).WithRunID()

// mapStatsScript replies { number of keys, entries swept, ms until the
// next entry expires (-1: none, or not asked) } after sweeping up to
// ARGV[9] expired entries ("0": only count).
var mapStatsScript = shardcast.NewScript(mapLua + `
local swept, next = 0, -1
if ARGV[9] ~= '0' then
  swept = sweep(tonumber(ARGV[9]))
  local first = redis.call('zrange', expiry, 0, 0, 'WITHSCORES')
  if first[2] then next = math.max(0, tonumber(first[2]) - now) end
end
return { redis.call('hlen', state), swept, next }
`).WithRunID()

// mapClearScript deletes a map channel's keys; its next call starts a new
// epoch.
var mapClearScript = shardcast.NewScript(`return redis.call('del', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])`)
