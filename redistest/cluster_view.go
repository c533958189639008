package redistest

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// SlotCount is the number of hash slots in Redis Cluster.
const SlotCount = 16384

// SlotRange is an inclusive range of hash slots.
type SlotRange struct {
	First, Last uint16
}

// nodeEntry is one line of CLUSTER NODES:
// <id> <ip:port@cport[,hostname]> <flags> <master> <ping> <pong> <epoch> <link> <slot>...
type nodeEntry struct {
	id        string
	addr      string // ip:port, without the bus port
	flags     []string
	masterID  string // "" for a master
	link      string
	slots     []SlotRange
	migrating bool // has [slot->-id] or [slot-<-id] entries
}

func (e nodeEntry) has(flag string) bool { return slices.Contains(e.flags, flag) }

// healthy reports that the viewer considers the node reachable and fully
// joined.
func (e nodeEntry) healthy() bool {
	return !e.has("fail") && !e.has("fail?") && !e.has("handshake") && !e.has("noaddr")
}

func (e nodeEntry) isMaster() bool { return e.has("master") }

// parseClusterNodes parses CLUSTER NODES output.
func parseClusterNodes(text string) ([]nodeEntry, error) {
	var entries []nodeEntry
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("%w: CLUSTER NODES line %q", ErrProtocol, line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		e := nodeEntry{id: f[0], addr: addr, flags: strings.Split(f[2], ","), link: f[7]}
		if f[3] != "-" {
			e.masterID = f[3]
		}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") {
				e.migrating = true
				continue
			}
			r, err := parseSlotRange(s)
			if err != nil {
				return nil, err
			}
			e.slots = append(e.slots, r)
		}
		entries = append(entries, e)
	}
	return entries, nil
}

func parseSlotRange(s string) (SlotRange, error) {
	a, b, isRange := strings.Cut(s, "-")
	if !isRange {
		b = a
	}
	first, err1 := strconv.ParseUint(a, 10, 16)
	last, err2 := strconv.ParseUint(b, 10, 16)
	if err1 != nil || err2 != nil || first > last || last >= SlotCount {
		return SlotRange{}, fmt.Errorf("%w: slot range %q", ErrProtocol, s)
	}
	return SlotRange{First: uint16(first), Last: uint16(last)}, nil
}

// slotOwner is one entry of CLUSTER SLOTS, by node ID.
type slotOwner struct {
	slots    SlotRange
	master   string
	replicas []string // sorted
}

// parseClusterSlots turns a CLUSTER SLOTS reply into entries sorted by
// first slot, replicas sorted by ID, so two nodes' views compare equal when
// they describe the same map.
func parseClusterSlots(reply any) ([]slotOwner, error) {
	arr, ok := reply.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: CLUSTER SLOTS answered %T", ErrProtocol, reply)
	}
	owners := make([]slotOwner, 0, len(arr))
	for _, item := range arr {
		e, ok := item.([]any)
		if !ok || len(e) < 3 {
			return nil, fmt.Errorf("%w: CLUSTER SLOTS entry %v", ErrProtocol, item)
		}
		first, ok1 := e[0].(int64)
		last, ok2 := e[1].(int64)
		if !ok1 || !ok2 || first < 0 || first > last || last >= SlotCount {
			return nil, fmt.Errorf("%w: CLUSTER SLOTS range %v-%v", ErrProtocol, e[0], e[1])
		}
		ids := make([]string, 0, len(e)-2)
		for _, n := range e[2:] {
			node, ok := n.([]any)
			if !ok || len(node) < 3 {
				return nil, fmt.Errorf("%w: CLUSTER SLOTS node %v", ErrProtocol, n)
			}
			id, ok := node[2].(string)
			if !ok {
				return nil, fmt.Errorf("%w: CLUSTER SLOTS node id %v", ErrProtocol, node[2])
			}
			ids = append(ids, id)
		}
		replicas := ids[1:]
		slices.Sort(replicas)
		owners = append(owners, slotOwner{
			slots:    SlotRange{First: uint16(first), Last: uint16(last)},
			master:   ids[0],
			replicas: replicas,
		})
	}
	slices.SortFunc(owners, func(a, b slotOwner) int { return int(a.slots.First) - int(b.slots.First) })
	return owners, nil
}

// slotMapKey is a canonical text form of a slot map, for equality checks
// and error messages.
func slotMapKey(owners []slotOwner) string {
	var b strings.Builder
	for _, o := range owners {
		fmt.Fprintf(&b, "%d-%d:%s", o.slots.First, o.slots.Last, o.master)
		for _, r := range o.replicas {
			b.WriteString("," + r)
		}
		b.WriteByte(' ')
	}
	return b.String()
}

// ownerOf returns the master ID owning slot, or "".
func ownerOf(owners []slotOwner, slot uint16) string {
	for _, o := range owners {
		if o.slots.First <= slot && slot <= o.slots.Last {
			return o.master
		}
	}
	return ""
}

// redisCLISlotSplit reproduces how `redis-cli --cluster create` splits the
// slots over k masters, float32 arithmetic included, so that a harness
// cluster has exactly the layout of a cluster an operator would create.
func redisCLISlotSplit(k int) []SlotRange {
	if k < 1 {
		return nil
	}
	perNode := float32(SlotCount) / float32(k)
	var cursor float32
	first := 0
	ranges := make([]SlotRange, 0, k)
	for i := range k {
		last := int(math.Round(float64(cursor + perNode - 1)))
		if last > SlotCount || i == k-1 {
			last = SlotCount - 1
		}
		if last < first {
			last = first
		}
		ranges = append(ranges, SlotRange{First: uint16(first), Last: uint16(last)})
		first = last + 1
		cursor += perNode
	}
	return ranges
}
