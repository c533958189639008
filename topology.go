package shardcast

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// ErrBadTopology wraps every error returned while turning a CLUSTER SLOTS or
// CLUSTER SHARDS reply into a SlotMap: a reply of the wrong shape, a Redis
// error inside the reply, an out-of-range or overlapping slot range, or a
// node whose address cannot be worked out. A Redis error found in the reply
// stays reachable through errors.Is/As as well.
var ErrBadTopology = errors.New("shardcast: bad cluster topology")

// topoSlotCount is the number of hash slots in a Redis Cluster.
const topoSlotCount = 16384

// NodeAddr is a Redis node address in "host:port" form, as net.JoinHostPort
// builds it (IPv6 hosts are bracketed).
type NodeAddr = string

// SlotRange is an inclusive range of hash slots served by one master.
type SlotRange struct {
	Start, End uint16
	// Master is the address of the master that owns the range; never empty
	// in a SlotMap.
	Master string
	// MasterID is the master's 40-character node ID, or "" when the reply
	// did not carry one.
	MasterID string
	// Replicas are the addresses of the master's replicas that Redis
	// reported as usable, sorted.
	Replicas []string
}

// SlotMap tells which master owns which slots; slots in no range are
// unowned. NewSlotMap and the parsers return Ranges sorted by Start,
// disjoint, each naming a master, which the methods rely on (they never
// panic on a hand-built map, but may answer wrongly for an unsorted one).
// They also merge adjacent ranges with the same master, master ID and
// replicas, so two maps describing the same ownership compare Equal however
// Redis split the ranges.
type SlotMap struct {
	Ranges []SlotRange
}

// NewSlotMap validates ranges and returns them as a normalised SlotMap:
// sorted, replicas sorted and de-duplicated, adjacent identical ranges
// merged. It reports ErrBadTopology for a range past slot 16383, a range
// whose End is below its Start, a range without a master, or two ranges that
// share a slot. The input slice is not modified.
func NewSlotMap(ranges []SlotRange) (SlotMap, error) {
	m, err := newSlotMap(ranges)
	if err != nil {
		return SlotMap{}, fmt.Errorf("%w: %w", ErrBadTopology, err)
	}
	return m, nil
}

// newSlotMap is NewSlotMap with errors the parsers wrap themselves.
func newSlotMap(ranges []SlotRange) (SlotMap, error) {
	out := make([]SlotRange, 0, len(ranges))
	for _, r := range ranges {
		if err := checkSlotRange(int64(r.Start), int64(r.End)); err != nil {
			return SlotMap{}, err
		}
		if r.Master == "" {
			return SlotMap{}, fmt.Errorf("slots %d-%d have no master address", r.Start, r.End)
		}
		// Copy the replicas so that the map never aliases caller memory.
		reps := slices.Clone(r.Replicas)
		slices.Sort(reps)
		r.Replicas = slices.Compact(reps)
		if len(r.Replicas) == 0 {
			r.Replicas = nil
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b SlotRange) int { return cmp.Compare(a.Start, b.Start) })
	merged := out[:0]
	for _, r := range out {
		if n := len(merged); n > 0 {
			prev := &merged[n-1]
			if r.Start <= prev.End {
				return SlotMap{}, fmt.Errorf("slots %d-%d (%s) overlap slots %d-%d (%s)",
					r.Start, r.End, r.Master, prev.Start, prev.End, prev.Master)
			}
			if r.Start == prev.End+1 && sameOwner(*prev, r) {
				prev.End = r.End
				continue
			}
		}
		merged = append(merged, r)
	}
	if len(merged) == 0 {
		return SlotMap{}, nil
	}
	return SlotMap{Ranges: merged}, nil
}

func sameOwner(a, b SlotRange) bool {
	return a.Master == b.Master && a.MasterID == b.MasterID && slices.Equal(a.Replicas, b.Replicas)
}

func checkSlotRange(start, end int64) error {
	switch {
	case start < 0 || start >= topoSlotCount:
		return fmt.Errorf("slot %d out of range 0-%d", start, topoSlotCount-1)
	case end < 0 || end >= topoSlotCount:
		return fmt.Errorf("slot %d out of range 0-%d", end, topoSlotCount-1)
	case end < start:
		return fmt.Errorf("slot range %d-%d ends before it starts", start, end)
	}
	return nil
}

// MasterOf returns the master that owns slot, and false when the slot is
// unowned or not a valid slot number.
func (m SlotMap) MasterOf(slot uint16) (string, bool) {
	i := sort.Search(len(m.Ranges), func(i int) bool { return m.Ranges[i].End >= slot })
	if i < len(m.Ranges) && m.Ranges[i].Start <= slot && m.Ranges[i].Master != "" {
		return m.Ranges[i].Master, true
	}
	return "", false
}

// Masters returns the distinct masters that own at least one slot, sorted.
func (m SlotMap) Masters() []string {
	out := make([]string, 0, len(m.Ranges))
	for _, r := range m.Ranges {
		if r.Master != "" {
			out = append(out, r.Master)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Covered reports whether every one of the 16384 slots has a master. While
// it is false, partitions on the uncovered slots have nowhere to subscribe.
func (m SlotMap) Covered() bool {
	next := 0
	for _, r := range m.Ranges {
		if int(r.Start) != next || r.Master == "" {
			return false
		}
		next = int(r.End) + 1
	}
	return next == topoSlotCount
}

// Equal reports whether m and o describe the same ranges with the same
// masters, master IDs and replicas. A nil and an empty replica list are
// equal. Compare Assignments instead to ask only whether partitions moved.
func (m SlotMap) Equal(o SlotMap) bool {
	return slices.EqualFunc(m.Ranges, o.Ranges, func(a, b SlotRange) bool {
		return a.Start == b.Start && a.End == b.End && sameOwner(a, b)
	})
}

// String renders the map for logs, one "start-end=master" item per range.
func (m SlotMap) String() string {
	var b strings.Builder
	for i, r := range m.Ranges {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d-%d=%s", r.Start, r.End, r.Master)
	}
	return b.String()
}

// ParseClusterSlots turns a CLUSTER SLOTS reply, in the shape rueidis'
// ToAny returns for RESP2 or RESP3, into a SlotMap. Redis lists only usable
// replicas in this reply and keeps a slot with its source master until
// CLUSTER SETSLOT … NODE, which makes it the reply to prefer over CLUSTER
// SHARDS on Redis 7.0.
//
// A node reported without an endpoint (an empty or null first field) can
// only be reached at the host the command was sent to, which this function
// does not know: such a reply is an error here. Use ParseClusterSlotsFrom
// when the address queried is known, as it is in an engine.
func ParseClusterSlots(reply any) (SlotMap, error) {
	return ParseClusterSlotsFrom(reply, "")
}

// ParseClusterSlotsFrom is ParseClusterSlots for a reply that came from the
// node at queried ("host:port" or a bare host). Node addresses are resolved
// as Redis documents them: the endpoint field when it names a host; the
// node's "ip" metadata when the endpoint is "?" (hostnames preferred but the
// node has none); the queried host when the endpoint is empty or null (the
// node does not know its address, or cluster-preferred-endpoint-type is
// unknown-endpoint). The port always comes from the reply.
func ParseClusterSlotsFrom(reply any, queried string) (SlotMap, error) {
	m, err := parseClusterSlots(reply, topoFallbackHost(queried))
	if err != nil {
		return SlotMap{}, fmt.Errorf("%w: CLUSTER SLOTS: %w", ErrBadTopology, err)
	}
	return m, nil
}

func parseClusterSlots(reply any, fallback string) (SlotMap, error) {
	entries, err := topoList(reply)
	if err != nil {
		return SlotMap{}, err
	}
	ranges := make([]SlotRange, 0, len(entries))
	for i, e := range entries {
		r, err := parseSlotsEntry(e, fallback)
		if err != nil {
			return SlotMap{}, fmt.Errorf("entry %d: %w", i, err)
		}
		ranges = append(ranges, r)
	}
	return newSlotMap(ranges)
}

// parseSlotsEntry reads [start, end, master, replica...].
func parseSlotsEntry(e any, fallback string) (SlotRange, error) {
	fields, err := topoList(e)
	if err != nil {
		return SlotRange{}, err
	}
	if len(fields) < 3 {
		return SlotRange{}, fmt.Errorf("has %d elements, want at least 3 (start, end, master)", len(fields))
	}
	start, err := topoInt(fields[0])
	if err != nil {
		return SlotRange{}, fmt.Errorf("start slot: %w", err)
	}
	end, err := topoInt(fields[1])
	if err != nil {
		return SlotRange{}, fmt.Errorf("end slot: %w", err)
	}
	if err := checkSlotRange(start, end); err != nil {
		return SlotRange{}, err
	}
	r := SlotRange{Start: uint16(start), End: uint16(end)}
	if r.Master, r.MasterID, err = parseSlotsNode(fields[2], fallback); err != nil {
		return SlotRange{}, fmt.Errorf("slots %d-%d: master: %w", start, end, err)
	}
	for j, n := range fields[3:] {
		addr, _, err := parseSlotsNode(n, fallback)
		if err != nil {
			return SlotRange{}, fmt.Errorf("slots %d-%d: replica %d: %w", start, end, j, err)
		}
		r.Replicas = append(r.Replicas, addr)
	}
	return r, nil
}

// parseSlotsNode reads [endpoint, port, id, metadata], where id (Redis 4+)
// and metadata (Redis 7+: a map, or a flat key/value array in RESP2) may be
// absent.
func parseSlotsNode(n any, fallback string) (addr, id string, err error) {
	fields, err := topoList(n)
	if err != nil {
		return "", "", err
	}
	if len(fields) < 2 {
		return "", "", fmt.Errorf("node has %d elements, want at least 2 (endpoint, port)", len(fields))
	}
	port, err := topoInt(fields[1])
	if err != nil {
		return "", "", fmt.Errorf("port: %w", err)
	}
	if len(fields) > 2 {
		if id, err = topoString(fields[2]); err != nil {
			return "", "", fmt.Errorf("node id: %w", err)
		}
	}
	var ip string
	if len(fields) > 3 {
		meta, err := topoFields(fields[3])
		if err != nil {
			return "", "", fmt.Errorf("node metadata: %w", err)
		}
		if v, ok := meta["ip"]; ok {
			if ip, err = topoString(v); err != nil {
				return "", "", fmt.Errorf("node metadata ip: %w", err)
			}
		}
	}
	addr, err = topoNodeAddr(fields[0], port, ip, fallback)
	return addr, id, err
}

// topoNodeAddr applies the endpoint rules documented on
// ParseClusterSlotsFrom.
func topoNodeAddr(endpoint any, port int64, ip, fallback string) (string, error) {
	if port <= 0 || port > 65535 {
		return "", fmt.Errorf("port %d out of range 1-65535", port)
	}
	var host string
	if endpoint != nil {
		var err error
		if host, err = topoString(endpoint); err != nil {
			return "", fmt.Errorf("endpoint: %w", err)
		}
	}
	switch host {
	case "?":
		if ip == "" {
			return "", errors.New(`endpoint is "?" (hostname unknown) and the node reports no ip`)
		}
		host = ip
	case "":
		if fallback == "" {
			return "", fmt.Errorf("node on port %d reports no endpoint and the queried address is unknown (parse with ParseClusterSlotsFrom or ParseClusterShardsFrom)", port)
		}
		host = fallback
	}
	return net.JoinHostPort(host, strconv.FormatInt(port, 10)), nil
}

// topoFallbackHost extracts the host from the address a reply came from.
func topoFallbackHost(queried string) string {
	if host, _, err := net.SplitHostPort(queried); err == nil {
		return host
	}
	return strings.TrimSuffix(strings.TrimPrefix(queried, "["), "]")
}

// topoList returns v as an array, or an error naming what was found,
// including a Redis error carried in the reply.
func topoList(v any) ([]any, error) {
	if l, ok := v.([]any); ok {
		return l, nil
	}
	return nil, topoWrongType("array", v)
}

// topoString accepts a string or []byte.
func topoString(v any) (string, error) {
	switch s := v.(type) {
	case string:
		return s, nil
	case []byte:
		return string(s), nil
	}
	return "", topoWrongType("string", v)
}

// topoInt accepts any Go integer type and a decimal string, because
// proxies and RESP2 paths do not always keep Redis integers as integers.
func topoInt(v any) (int64, error) {
	switch n := v.(type) {
	case int64:
		return n, nil
	case int:
		return int64(n), nil
	case int32:
		return int64(n), nil
	case uint16:
		return int64(n), nil
	case uint32:
		return int64(n), nil
	case uint64:
		if n <= 1<<63-1 {
			return int64(n), nil
		}
	case string, []byte:
		s, _ := topoString(n)
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i, nil
		}
	}
	return 0, topoWrongType("integer", v)
}

func topoWrongType(want string, got any) error {
	switch g := got.(type) {
	case error:
		return fmt.Errorf("want %s, got redis error: %w", want, g)
	case nil:
		return fmt.Errorf("want %s, got nil", want)
	case string, []byte:
		s, _ := topoString(g)
		if len(s) > 40 {
			s = s[:40] + "…"
		}
		return fmt.Errorf("want %s, got string %q", want, s)
	}
	return fmt.Errorf("want %s, got %T", want, got)
}

// Assignment maps partition index to the address of the master that owns
// the partition's slot; "" marks a partition whose slot has no master.
type Assignment []string

// Assign computes the owner of each of partitions partitions, where slotOf
// gives a partition's hash slot. A nil slotOf or a non-positive count gives
// an empty Assignment; a slot past 16383 counts as unowned.
func Assign(slotOf func(partition int) uint16, partitions int, m SlotMap) Assignment {
	if slotOf == nil || partitions <= 0 {
		return Assignment{}
	}
	a := make(Assignment, partitions)
	for p := range a {
		a[p], _ = m.MasterOf(slotOf(p))
	}
	return a
}

// AssignLayout is Assign over the partitions of l. A nil l gives an empty
// Assignment.
func AssignLayout(l *Layout, m SlotMap) Assignment {
	if l == nil {
		return Assignment{}
	}
	return Assign(l.Slot, l.Partitions(), m)
}

// PartitionsOf returns, ascending, the partitions master owns; with master
// "" it returns the unowned partitions.
func (a Assignment) PartitionsOf(master string) []int {
	var out []int
	for p, owner := range a {
		if owner == master {
			out = append(out, p)
		}
	}
	return out
}

// Counts returns how many partitions each master owns. Unowned partitions
// are not counted; PartitionsOf("") lists them.
func (a Assignment) Counts() map[string]int {
	out := make(map[string]int)
	for _, owner := range a {
		if owner != "" {
			out[owner]++
		}
	}
	return out
}

// Masters returns the distinct masters that own at least one partition,
// sorted.
func (a Assignment) Masters() []string {
	out := make([]string, 0, len(a))
	for _, owner := range a {
		if owner != "" {
			out = append(out, owner)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// PartitionMove is one partition whose owner changed. From or To is "" when
// the partition was or became unowned.
type PartitionMove struct {
	Partition int
	From, To  string
}

// AssignmentDiff is what changed between two Assignments.
type AssignmentDiff struct {
	// Moved lists every partition whose owner changed, by partition index.
	Moved []PartitionMove
	// AddedMasters own partitions in the new assignment and none in the
	// old one; RemovedMasters the reverse. Both are sorted.
	AddedMasters, RemovedMasters []string
}

// DiffAssignments compares the assignment before a topology change with the
// one after it, partition by partition. When
// their lengths differ (a Layout change, which the engine should reject
// before it gets here) a partition missing on one side counts as unowned on
// that side, so the extra partitions show up as moves from or to "" rather
// than being silently ignored.
func DiffAssignments(before, after Assignment) AssignmentDiff {
	var d AssignmentDiff
	for p := range max(len(before), len(after)) {
		var from, to string
		if p < len(before) {
			from = before[p]
		}
		if p < len(after) {
			to = after[p]
		}
		if from != to {
			d.Moved = append(d.Moved, PartitionMove{Partition: p, From: from, To: to})
		}
	}
	oldMasters, newMasters := before.Masters(), after.Masters()
	for _, m := range newMasters {
		if _, found := slices.BinarySearch(oldMasters, m); !found {
			d.AddedMasters = append(d.AddedMasters, m)
		}
	}
	for _, m := range oldMasters {
		if _, found := slices.BinarySearch(newMasters, m); !found {
			d.RemovedMasters = append(d.RemovedMasters, m)
		}
	}
	return d
}

// Empty reports whether the diff holds no change at all.
func (d AssignmentDiff) Empty() bool {
	return len(d.Moved) == 0 && len(d.AddedMasters) == 0 && len(d.RemovedMasters) == 0
}
