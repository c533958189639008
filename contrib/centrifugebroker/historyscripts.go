package centrifugebroker

import "github.com/shardcast/shardcast"

// The history of a channel lives beside the channel, on the Redis node
// that carries it (in its slot, on a cluster): a stream of the kept
// publications, ids "offset-0", each entry one field "d" holding the
// Protobuf Publication; a meta hash with the stream's epoch "e", top
// offset "s", the run_id "r" of the server that last wrote it and, for
// version skipping, the last version "v" and its epoch "ve"; and per
// idempotency key a result hash of the first publish's epoch "e" and
// offset "s".
//
// The run_id is the scripts' last ARGV (shardcast.Script.WithRunID), the
// one before it "1" under Config.NewEpochOnServerChange: then a meta
// written by another server process (a replica promoted by a failover,
// the same server restarted from its last snapshot, a slot migrated),
// which may have lost its last writes, starts the history over under a
// new epoch. A meta without "r" (written before it was kept) takes the
// caller's; an unknown run_id ("": the user may not run INFO) checks
// nothing.
//
// Durations are milliseconds (PEXPIRE), "0" for none.

// epochLua is the meta check both scripts run: with stream, meta, strict,
// run and new_epoch set, it leaves epoch (and m, the meta's fields e, s
// and r) as the history's, starting a new one when the meta is missing or
// another server wrote it.
const epochLua = `
local m = redis.call('hmget', meta, 'e', 's', 'r')
local epoch = m[1]
if epoch and strict == '1' and run ~= '' and m[3] and m[3] ~= run then
  redis.call('del', meta, stream)
  epoch, m = nil, {}
end
if not epoch then
  epoch = new_epoch
  redis.call('hset', meta, 'e', epoch)
end
if run ~= '' and m[3] ~= run then
  redis.call('hset', meta, 'r', run)
end
`

// publishScript publishes one publication idempotently and/or into the
// channel's history, atomically: remember, write, publish, in the order
// that leaves nothing half-done if it fails partway.
//
//	KEYS: stream, meta, result
//	ARGV: 1 envelope header (empty in raw mode), 2 Protobuf Publication,
//	      3 wire channel, 4 "publish" or "spublish", 5 history size ("0":
//	      no history), 6 stream TTL, 7 meta TTL, 8 epoch for a new
//	      stream, 9 result TTL ("0": no idempotency), 10 "1" for a delta,
//	      11 version ("0": none), 12 version epoch, 13 "1" for a new epoch
//	      on a server change, 14 run_id (added by the engine)
//
// It replies { offset, epoch, suppressed } with suppressed 0 (published),
// 1 (an earlier publish with this idempotency key; its position) or 2 (an
// equal or newer version is in the stream; the current position).
var publishScript = shardcast.NewScript(`
local stream, meta, result = KEYS[1], KEYS[2], KEYS[3]
local header, pub, wire, publish = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local size, stream_ttl, meta_ttl, new_epoch = ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local result_ttl, delta, version, version_epoch = ARGV[9], ARGV[10], ARGV[11], ARGV[12]
local strict, run = ARGV[13], ARGV[14]

if result_ttl ~= '0' then
  local r = redis.call('hmget', result, 'e', 's')
  if r[1] then
    return { tonumber(r[2]), r[1], 1 }
  end
end

if size == '0' then
  redis.call(publish, wire, header .. '\1' .. pub)
  redis.call('hset', result, 'e', '', 's', 0)
  redis.call('pexpire', result, result_ttl)
  return { 0, '', 0 }
end

-- versions are decimal uint64 without leading zeros: compare as text,
-- Lua numbers lose precision past 2^53
local function at_least(a, b)
  if #a ~= #b then return #a > #b end
  return a >= b
end

` + epochLua + `
if version ~= '0' then
  local v = redis.call('hmget', meta, 'v', 've', 's')
  if v[1] and (version_epoch == '' or version_epoch == v[2]) and at_least(v[1], version) then
    return { tonumber(v[3] or '0'), epoch, 2 }
  end
  redis.call('hset', meta, 'v', version, 've', version_epoch)
end

local offset = redis.call('hincrby', meta, 's', 1)
if meta_ttl ~= '0' then
  redis.call('pexpire', meta, meta_ttl)
end

local prev = ''
if offset == 1 then
  -- a new epoch: whatever is left of a stream whose meta expired or was
  -- evicted belongs to the old one
  redis.call('del', stream)
elseif delta == '1' then
  local last = redis.call('xrevrange', stream, '+', '-', 'COUNT', 1)
  if #last > 0 then
    local fields = last[1][2]
    for i = 1, #fields, 2 do
      if fields[i] == 'd' then prev = fields[i + 1] end
    end
  end
end

redis.call('xadd', stream, 'MAXLEN', size, offset, 'd', pub)
redis.call('pexpire', stream, stream_ttl)

local position = string.format('%d:%s:', offset, epoch)
if delta == '1' then
  redis.call(publish, wire, header .. '\6' .. position .. #prev .. ':' .. prev .. pub)
else
  redis.call(publish, wire, header .. '\5' .. position .. pub)
end

if result_ttl ~= '0' then
  redis.call('hset', result, 'e', epoch, 's', offset)
  redis.call('pexpire', result, result_ttl)
end
return { offset, epoch, 0 }
`).WithRunID()

// historyScript reads a channel's stream position and publications,
// starting a new epoch if the channel has none.
//
//	KEYS: stream, meta
//	ARGV: 1 "1" to read publications, 2 first offset ("0": from the
//	      start, or the top in reverse), 3 count ("0": all), 4 "1" for
//	      reverse, 5 meta TTL, 6 epoch for a new stream, 7 "1" for a new
//	      epoch on a server change, 8 run_id (added by the engine)
//
// It replies { top offset, epoch, entries } (entries only when asked),
// entries as XRANGE replies them.
var historyScript = shardcast.NewScript(`
local stream, meta = KEYS[1], KEYS[2]
local with_pubs, from, count, reverse, meta_ttl, new_epoch = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local strict, run = ARGV[7], ARGV[8]
` + epochLua + `
local top = m[2] or '0'
if meta_ttl ~= '0' then
  redis.call('pexpire', meta, meta_ttl)
end
if with_pubs == '0' then
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

// removeHistoryScript deletes a channel's stream; the meta hash stays, so
// the epoch and offsets go on.
var removeHistoryScript = shardcast.NewScript(`return redis.call('del', KEYS[1])`)
