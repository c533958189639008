package agreement

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/layoutkey"
)

// instanceIDScript returns the id instance KEYS[1] holds, writing ARGV[1]
// first if it holds none: SET NX and GET in one step, so that brokers
// starting together read the same id.
var instanceIDScript = shardcast.NewScript(`
local id = redis.call('GET', KEYS[1])
if id then
  return id
end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
`)

// AddrIDPrefix starts the id of an instance named by its address, where
// it could not keep an id of its own.
const AddrIDPrefix = "addr:"

// InstanceID returns the id of the instance run reaches, addr by name
// (layoutkey.Instance), writing a new random one if it has
// none. Where the instance cannot keep one (a replica refuses the write,
// a user lacks the permission, scripts are off), it returns the address
// form, AddrIDPrefix + addr, and the reason: that instance is then
// compared by address, as before the ids.
func InstanceID(ctx context.Context, run Runner, a shardcast.Agreement, addr string) (string, error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	v, err := run(ctx, instanceIDScript, []string{layoutkey.Instance(a)}, []string{"i-" + hex.EncodeToString(b[:])})
	if err != nil {
		return AddrIDPrefix + addr, fmt.Errorf("shardcast: instance id %s on %s: %w", layoutkey.Instance(a), addr, err)
	}
	id, ok := v.(string)
	if !ok || id == "" || strings.HasPrefix(id, AddrIDPrefix) {
		return AddrIDPrefix + addr, fmt.Errorf("shardcast: instance id %s on %s: unexpected reply %v", layoutkey.Instance(a), addr, v)
	}
	return id, nil
}

// sameInstances reports whether layouts a and b are the sharded engine's
// over the same instances in the same order, by their ids: then they route
// every channel alike whatever their addresses. Records without ids
// (written before they existed) are never the same by this rule.
func sameInstances(a, b shardcast.LayoutRecord) bool {
	return a.Engine == "sharded" && b.Engine == "sharded" && len(a.InstanceIDs) > 0 &&
		len(a.InstanceIDs) == len(a.Instances) && len(b.InstanceIDs) == len(b.Instances) &&
		slices.Equal(a.InstanceIDs, b.InstanceIDs)
}

// refreshIDsScript sets the record's instance_ids to ARGV[2] if it still
// holds fingerprint ARGV[1]: a broker of the recorded layout, just joined,
// records the ids its instances hold now (a record written before the ids
// existed gets them; an instance that lost its data and its id has a new
// one).
var refreshIDsScript = shardcast.NewScript(`
if redis.call('HGET', KEYS[1], 'fingerprint') ~= ARGV[1] then
  return 0
end
if redis.call('HGET', KEYS[1], 'instance_ids') == ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1], 'instance_ids', ARGV[2])
return 1
`)
