package shardcast

import "fmt"

// ParseClusterShards turns a CLUSTER SHARDS reply (Redis 7+), in the shape
// rueidis' ToAny returns for RESP2 (flat key/value arrays) or RESP3 (maps),
// into a SlotMap.
//
// Redis 7.0 keeps reporting nodes in this reply that must not be used, so
// each shard's slots go to the one node that is role "master" AND health
// "online". A shard without such a node (its master failed and no replica
// has taken over yet) leaves its slots unowned in the result rather than
// assigning them to a dead node; a dead master that a replica replaced shows
// up as such a shard, with no slots. Only online replicas are listed: a
// fresh replica still syncing reports health "loading". Two online masters
// in one shard are an error, because which one serves the slots cannot be
// told from the reply.
//
// The port is the node's "port" field, or "tls-port" when "port" is absent
// or zero. Endpoints follow the rules of ParseClusterSlotsFrom; a node
// without an "endpoint" field is reached at its "ip". A node reported
// without an endpoint makes this function fail: use ParseClusterShardsFrom.
func ParseClusterShards(reply any) (SlotMap, error) {
	return ParseClusterShardsFrom(reply, "")
}

// ParseClusterShardsFrom is ParseClusterShards for a reply that came from
// the node at queried ("host:port" or a bare host), whose host stands in
// for nodes reported with an empty or null endpoint.
func ParseClusterShardsFrom(reply any, queried string) (SlotMap, error) {
	m, err := parseClusterShards(reply, topoFallbackHost(queried))
	if err != nil {
		return SlotMap{}, fmt.Errorf("%w: CLUSTER SHARDS: %w", ErrBadTopology, err)
	}
	return m, nil
}

func parseClusterShards(reply any, fallback string) (SlotMap, error) {
	shards, err := topoList(reply)
	if err != nil {
		return SlotMap{}, err
	}
	var ranges []SlotRange
	for i, s := range shards {
		rs, err := parseShard(s, fallback)
		if err != nil {
			return SlotMap{}, fmt.Errorf("shard %d: %w", i, err)
		}
		ranges = append(ranges, rs...)
	}
	return newSlotMap(ranges)
}

// parseShard returns the shard's slot ranges, owned by its online master,
// or nothing when the shard has no online master.
func parseShard(s any, fallback string) ([]SlotRange, error) {
	shard, err := topoFields(s)
	if err != nil {
		return nil, err
	}
	slots, err := topoRequiredList(shard, "slots")
	if err != nil {
		return nil, err
	}
	if len(slots)%2 != 0 {
		return nil, fmt.Errorf("slots has %d elements, want start/end pairs", len(slots))
	}
	nodes, err := topoRequiredList(shard, "nodes")
	if err != nil {
		return nil, err
	}
	var (
		master     topoShardNode
		haveMaster bool
		replicas   []string
	)
	for j, n := range nodes {
		node, err := parseShardNode(n)
		if err != nil {
			return nil, fmt.Errorf("node %d: %w", j, err)
		}
		if node.health != "online" {
			continue
		}
		switch node.role {
		case "master":
			if haveMaster {
				return nil, fmt.Errorf("two online masters, %q and %q", master.id, node.id)
			}
			master, haveMaster = node, true
		case "replica", "slave":
			addr, err := node.addr(fallback)
			if err != nil {
				return nil, fmt.Errorf("replica %q: %w", node.id, err)
			}
			replicas = append(replicas, addr)
		}
	}
	ranges := make([]SlotRange, 0, len(slots)/2)
	for k := 0; k < len(slots); k += 2 {
		start, err := topoInt(slots[k])
		if err != nil {
			return nil, fmt.Errorf("slot range %d start: %w", k/2, err)
		}
		end, err := topoInt(slots[k+1])
		if err != nil {
			return nil, fmt.Errorf("slot range %d end: %w", k/2, err)
		}
		if err := checkSlotRange(start, end); err != nil {
			return nil, err
		}
		ranges = append(ranges, SlotRange{Start: uint16(start), End: uint16(end)})
	}
	if !haveMaster || len(ranges) == 0 {
		// Unowned: the slots were checked above so that a malformed reply
		// is reported even when no node can take them.
		return nil, nil
	}
	addr, err := master.addr(fallback)
	if err != nil {
		return nil, fmt.Errorf("master %q: %w", master.id, err)
	}
	for k := range ranges {
		// Sharing one replica slice is safe: newSlotMap copies it.
		ranges[k].Master, ranges[k].MasterID, ranges[k].Replicas = addr, master.id, replicas
	}
	return ranges, nil
}

// topoShardNode holds the fields of one CLUSTER SHARDS node that decide whether
// it is used; the address is resolved only for nodes that are.
type topoShardNode struct {
	fields           map[string]any
	id, role, health string
}

func parseShardNode(n any) (topoShardNode, error) {
	fields, err := topoFields(n)
	if err != nil {
		return topoShardNode{}, err
	}
	node := topoShardNode{fields: fields}
	if node.id, err = node.stringField("id"); err != nil {
		return topoShardNode{}, err
	}
	if node.role, err = node.stringField("role"); err != nil {
		return topoShardNode{}, err
	}
	if node.health, err = node.stringField("health"); err != nil {
		return topoShardNode{}, err
	}
	return node, nil
}

func (n topoShardNode) addr(fallback string) (string, error) {
	port, err := n.intField("port")
	if err != nil {
		return "", err
	}
	if port == 0 {
		if port, err = n.intField("tls-port"); err != nil {
			return "", err
		}
	}
	ip, err := n.stringField("ip")
	if err != nil {
		return "", err
	}
	endpoint, ok := n.fields["endpoint"]
	if !ok {
		endpoint = ip
	}
	return topoNodeAddr(endpoint, port, ip, fallback)
}

// intField returns 0 for an absent field.
func (n topoShardNode) intField(key string) (int64, error) {
	v, ok := n.fields[key]
	if !ok {
		return 0, nil
	}
	i, err := topoInt(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", key, err)
	}
	return i, nil
}

// stringField returns "" for an absent field.
func (n topoShardNode) stringField(key string) (string, error) {
	v, ok := n.fields[key]
	if !ok {
		return "", nil
	}
	s, err := topoString(v)
	if err != nil {
		return "", fmt.Errorf("%s: %w", key, err)
	}
	return s, nil
}

func topoRequiredList(fields map[string]any, key string) ([]any, error) {
	v, ok := fields[key]
	if !ok {
		return nil, fmt.Errorf("no %q field", key)
	}
	l, err := topoList(v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	return l, nil
}

// topoFields reads a RESP3 map or its RESP2 form, a flat array of
// alternating keys and values. A key repeated in the flat form keeps its
// last value, as the map form would.
func topoFields(v any) (map[string]any, error) {
	switch f := v.(type) {
	case map[string]any:
		return f, nil
	case map[any]any:
		out := make(map[string]any, len(f))
		for k, val := range f {
			key, err := topoString(k)
			if err != nil {
				return nil, fmt.Errorf("map key: %w", err)
			}
			out[key] = val
		}
		return out, nil
	case []any:
		if len(f)%2 != 0 {
			return nil, fmt.Errorf("key/value array has odd length %d", len(f))
		}
		out := make(map[string]any, len(f)/2)
		for i := 0; i < len(f); i += 2 {
			key, err := topoString(f[i])
			if err != nil {
				return nil, fmt.Errorf("key %d: %w", i/2, err)
			}
			out[key] = f[i+1]
		}
		return out, nil
	}
	return nil, topoWrongType("map", v)
}
