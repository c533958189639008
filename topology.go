package shardcast

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// ParseClusterSlotsFrom turns a CLUSTER SLOTS reply, decoded as arrays
// ([]any), strings and int64 (the shape of rueidis' ToAny for RESP2 or
// RESP3, and of the cluster engine's own RESP2 reader), into a SlotMap;
// queried is the address ("host:port" or a bare host) of the node the
// reply came from. Redis lists
// only usable replicas in this reply and keeps a slot with its source master
// until CLUSTER SETSLOT … NODE, which makes it the reply to trust on Redis
// 7.0 (CLUSTER SHARDS there lists dead masters and loading replicas).
//
// Node addresses are resolved as Redis documents them: the endpoint field
// when it names a host; the node's "ip" metadata when the endpoint is "?"
// (hostnames preferred but the node has none); the queried host when the
// endpoint is empty or null (the node does not know its address, or
// cluster-preferred-endpoint-type is unknown-endpoint). The port always
// comes from the reply. With queried "", a node reported without an
// endpoint makes the reply an error.
//
// Every error wraps ErrBadTopology. ParseClusterSlotsFrom never panics,
// whatever the reply holds.
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
	return NewSlotMap(ranges)
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
			return "", fmt.Errorf("node on port %d reports no endpoint and the queried address is unknown", port)
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
