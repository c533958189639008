package centrifugebroker

import (
	"strconv"

	"github.com/shardcast/shardcast"
)

// A channel's presence lives beside the channel (see keyspace) in up to
// four keys:
//
//	clients  hash  client ID → Protobuf ClientInfo (with the client ID)
//	expiry   zset  client ID, scored by when its entry expires (ms)
//	user_of  hash  client ID → user ID, for the clients counted in users
//	users    hash  user ID → how many of its clients are counted
//
// user_of and users exist only for channels with user mapping
// (PresenceConfig.UserMapping). Every script keeps one invariant: users
// counts, per user, exactly the clients user_of names, so that the number
// of unique users is HLEN users, and removing or expiring a client can
// uncount it without being told its user. A channel whose mapping was
// turned on while it had entries counts them as they are re-added.
//
// Expiry is judged by the Redis server's clock (TIME), so that the nodes'
// clocks need not agree. An entry is removed from clients and expiry,
// and uncounted, by the first script that finds its time passed: reads
// sweep every such entry (asking the server's clock only once the calling
// node's says the earliest may be due: readSweepLua); an add that brings a new client sweeps a
// bounded number, so a channel nobody reads sheds its dead entries as
// clients join, while the re-adds that keep entries alive stay cheap.
//
// The keys themselves outlive their entries: an add that finds less than
// its TTL left on clients sets the TTL of every key it uses to twice its
// own (it never shortens one: another node may keep entries with a longer
// TTL), so most adds read one TTL and write none, and a channel nobody
// re-adds to disappears whole within twice the TTL. clients and expiry
// always hold the same members, so they are created, emptied and
// extended together; user_of and users are also checked when an add
// writes them.
//
// Durations are milliseconds.

// presenceSweepPerAdd bounds the expired entries an add of a new client
// removes.
const presenceSweepPerAdd = 64

// presenceKeysLua names a presence script's keys.
const presenceKeysLua = `
local clients, expiry, user_of, users = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
`

// uncountLua defines uncount, which drops a client from the user counts
// if it is counted there.
const uncountLua = `
local function uncount(client)
  local user = redis.call('hget', user_of, client)
  if user then
    redis.call('hdel', user_of, client)
    if redis.call('hincrby', users, user, -1) <= 0 then
      redis.call('hdel', users, user)
    end
  end
end
`

// sweepLua takes the server's time now (ms) and defines sweep, which
// removes entries whose time has passed, at most max (0: all), in batches
// that unpack can spread over a call's arguments. It needs uncountLua.
const sweepLua = `
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function sweep(max)
  local counted
  local swept = 0
  while max == 0 or swept < max do
    local n = 1000
    if max ~= 0 and max - swept < n then n = max - swept end
    local gone = redis.call('zrangebyscore', expiry, '-inf', now, 'LIMIT', 0, n)
    if #gone == 0 then return end
    redis.call('hdel', clients, unpack(gone))
    redis.call('zrem', expiry, unpack(gone))
    if counted == nil then counted = redis.call('exists', user_of) == 1 end
    if counted then
      for _, client in ipairs(gone) do uncount(client) end
    end
    swept = swept + #gone
    if #gone < n then return end
  end
end
`

// readSweepLua is how a read starts: it sweeps the expired entries, but
// looks at the server's clock (a script call as costly as the read's
// own) only when the earliest expiry has passed by the calling node's
// clock, ARGV[1] (ms). A node whose clock runs behind the server's by d
// may so see an entry up to d after it expired; one ahead costs a TIME.
const readSweepLua = presenceKeysLua + `
local first = redis.call('zrange', expiry, '0', '0', 'WITHSCORES')
if first[2] and tonumber(first[2]) <= tonumber(ARGV[1]) then
` + uncountLua + sweepLua + `
  sweep(0)
end
`

// addPresenceScript sets a client's entry and starts its TTL over; steady
// re-adds of a counted client cost TIME, HSET, ZADD, HGET and one PTTL.
//
//	KEYS: clients, expiry, user_of, users
//	ARGV: 1 client ID, 2 Protobuf ClientInfo, 3 user ID, 4 TTL, 5 "1" to
//	      count the client's user
//
// It replies 1.
var addPresenceScript = shardcast.NewScript(presenceKeysLua + uncountLua + sweepLua + `
local client, info, user, ttl, mapped = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]

-- extend gives key twice ttl to live if it has less than ttl left.
local function extend(key)
  if redis.call('pttl', key) < ttl then redis.call('pexpire', key, 2 * ttl) end
end

if redis.call('hset', clients, client, info) == 1 then
  sweep(` + strconv.Itoa(presenceSweepPerAdd) + `)
end
redis.call('zadd', expiry, now + ttl, client)
if mapped == '1' and redis.call('hget', user_of, client) ~= user then
  uncount(client)
  redis.call('hset', user_of, client, user)
  redis.call('hincrby', users, user, 1)
  extend(user_of)
  extend(users)
end
if redis.call('pttl', clients) < ttl then
  redis.call('pexpire', clients, 2 * ttl)
  redis.call('pexpire', expiry, 2 * ttl)
  if mapped == '1' then
    extend(user_of)
    extend(users)
  end
end
return 1
`)

// removePresenceScript removes a client's entry.
//
//	KEYS: clients, expiry, user_of, users
//
// It replies 1.
var removePresenceScript = shardcast.NewScript(presenceKeysLua + uncountLua + `
local client = ARGV[1]
redis.call('hdel', clients, client)
redis.call('zrem', expiry, client)
uncount(client)
return 1
`)

// presenceScript sweeps a channel's expired entries and replies the live
// ones' ClientInfo (which holds the client ID), as HVALS clients does: half
// the reply HGETALL would send.
//
//	KEYS: clients, expiry, user_of, users
//	ARGV: 1 the calling node's time (ms)
var presenceScript = shardcast.NewScript(readSweepLua + `
return redis.call('hvals', clients)
`)

// presenceStatsScript sweeps a channel's expired entries and replies
// { clients, users }: how many entries there are and how many users the
// counted ones belong to.
//
//	KEYS: clients, expiry, user_of, users
//	ARGV: 1 the calling node's time (ms)
var presenceStatsScript = shardcast.NewScript(readSweepLua + `
return { redis.call('hlen', clients), redis.call('hlen', users) }
`)

// With PresenceConfig.FieldTTL the entries expire on their own instead:
// each clients field, and its user_of field, carries the entry's TTL
// (HPEXPIRE, Redis 7.4+ and Valkey 9+), and the server drops it when it
// runs out. There is no expiry zset and no sweep, so reads write nothing
// and can run on replicas, which hide expired fields until the master's
// deletion reaches them. A users field lives as long as the user's
// longest-lived client: each add gives it at least the client's TTL. An
// entry that expires is not uncounted from its user, so a user whose
// clients all left can be counted until the TTL after its last add,
// when one of them expired instead of leaving. Removal is
// removePresenceScript's, which works in both modes.

// addFieldPresenceScript is addPresenceScript with per-field expiry.
//
//	KEYS: clients, expiry (unused), user_of, users
//	ARGV: 1 client ID, 2 Protobuf ClientInfo, 3 user ID, 4 TTL, 5 "1" to
//	      count the client's user
//
// It replies 1.
var addFieldPresenceScript = shardcast.NewScript(`
local clients, user_of, users = KEYS[1], KEYS[3], KEYS[4]
local client, info, user, ttl, mapped = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]

-- extend gives key twice ttl to live if it has less than ttl left.
local function extend(key)
  if redis.call('pttl', key) < ttl then redis.call('pexpire', key, 2 * ttl) end
end

redis.call('hset', clients, client, info)
redis.call('hpexpire', clients, ttl, 'FIELDS', 1, client)
if mapped == '1' then
  local was = redis.call('hget', user_of, client)
  if was ~= user then
    if was and redis.call('hincrby', users, was, -1) <= 0 then
      redis.call('hdel', users, was)
    end
    redis.call('hset', user_of, client, user)
    redis.call('hincrby', users, user, 1)
  end
  redis.call('hpexpire', user_of, ttl, 'FIELDS', 1, client)
  if redis.call('hpttl', users, 'FIELDS', 1, user)[1] < ttl then
    redis.call('hpexpire', users, ttl, 'FIELDS', 1, user)
  end
  extend(user_of)
  extend(users)
end
extend(clients)
return 1
`)

// presenceFieldScript replies the live entries' ClientInfo; it writes
// nothing, so it runs read-only, on a replica too.
//
//	KEYS: clients, expiry, user_of, users
var presenceFieldScript = shardcast.NewScript(`return redis.call('hvals', KEYS[1])`)

// presenceStatsFieldScript replies { clients, users }; it writes nothing.
// HLEN counts a field that expired until the server deletes it, which
// its active expiry does within a moment.
//
//	KEYS: clients, expiry, user_of, users
var presenceStatsFieldScript = shardcast.NewScript(`return { redis.call('hlen', KEYS[1]), redis.call('hlen', KEYS[4]) }`)
