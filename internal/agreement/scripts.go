package agreement

import "github.com/shardcast/shardcast"

// The scripts take KEYS[1] = the record (a hash) and KEYS[2] = the
// registry (a sorted set of broker ids scored by the server time in ms at
// which each registration expires). Time is the Redis server's, so the
// brokers' clocks do not matter. docs/LAYOUT.md §9 describes them for
// implementations in other languages.

// joinScript prunes expired brokers, then registers ARGV[1] for ARGV[2] ms
// if the record holds fingerprint ARGV[3], or a re-layout from or to it is
// under way (KEYS[3], the transition, when given; to it, while the
// re-layout aborts, only for a broker registered already, which follows
// the abort back to from), or if there is no record or no
// other live broker (then it first replaces the record with ARGV[3] and
// the field/value pairs ARGV[4..]). Otherwise it changes nothing else and
// reports the record. It serves both New and the heartbeat: a heartbeat
// that finds the record gone (a Redis restart without persistence)
// writes it again.
//
// Reply: {"joined", others} or {"wrote", others}, where others counts the
// other live brokers, or {"mismatch", others, {up to 5 of them}, {the
// record's field, value, ...}}.
var joinScript = shardcast.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local others = redis.call('ZCARD', KEYS[2])
local known = redis.call('ZSCORE', KEYS[2], ARGV[1])
if known then
  others = others - 1
end
local status = 'joined'
local fp = redis.call('HGET', KEYS[1], 'fingerprint')
if fp ~= ARGV[3] and KEYS[3] then
  local tr = redis.call('HMGET', KEYS[3], 'from', 'to', 'phase')
  if tr[1] == ARGV[3] or (tr[2] == ARGV[3] and (tr[3] ~= 'abort' or known)) then
    fp = ARGV[3]
  end
end
if fp ~= ARGV[3] then
  if fp and others > 0 then
    return {'mismatch', others, redis.call('ZRANGE', KEYS[2], 0, 4), redis.call('HGETALL', KEYS[1])}
  end
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'version', '1', 'fingerprint', ARGV[3], 'written_by', ARGV[1],
    'written_at', string.format('%d', now), unpack(ARGV, 4))
  status = 'wrote'
end
redis.call('ZADD', KEYS[2], string.format('%d', now + tonumber(ARGV[2])), ARGV[1])
return {status, others}
`)

// leaveScript removes broker ARGV[1] from the registry KEYS[2]. (A script
// rather than a plain ZREM so that every call goes through one path.)
var leaveScript = shardcast.NewScript(`
return redis.call('ZREM', KEYS[2], ARGV[1])
`)

// readScript returns the record, the live brokers and the server time
// without changing anything: {now, {field, value, ...}, {id, expiry, ...}}
// with only unexpired brokers.
var readScript = shardcast.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return {now, redis.call('HGETALL', KEYS[1]),
  redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. string.format('%d', now), '+inf', 'WITHSCORES')}
`)
