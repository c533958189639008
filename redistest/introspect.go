package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// Info runs INFO <section> ("" for the default sections) and returns its
// fields as key → value. Section headers and blank lines are dropped.
func (s *Server) Info(ctx context.Context, section string) (map[string]string, error) {
	args := []string{"INFO"}
	if section != "" {
		args = append(args, section)
	}
	reply, err := s.Do(ctx, args...)
	if err != nil {
		return nil, fmt.Errorf("redistest: %s INFO %s: %w", s.Addr(), section, err)
	}
	text, ok := reply.(string)
	if !ok {
		return nil, fmt.Errorf("%w: INFO answered %T", ErrProtocol, reply)
	}
	return parseInfo(text), nil
}

// parseInfo splits "key:value" lines.
func parseInfo(text string) map[string]string {
	fields := make(map[string]string)
	for line := range strings.Lines(text) {
		line = strings.TrimRight(line, "\r\n")
		if line == "" || line[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = v
		}
	}
	return fields
}

// CommandStats returns how many times each command has been called since
// the server started (or since CONFIG RESETSTAT), from INFO commandstats,
// keyed by lower-case command name: "spublish", "ssubscribe",
// "client|list". Commands never called are absent (read them as 0).
func (s *Server) CommandStats(ctx context.Context) (map[string]int64, error) {
	info, err := s.Info(ctx, "commandstats")
	if err != nil {
		return nil, err
	}
	return parseCommandStats(info)
}

// ReadOnlyScripts returns how many read-only script calls (EVAL_RO and
// EVALSHA_RO, from INFO commandstats) the running ones among servers have
// answered: where a broker sent its reads. A stopped server counts none.
func ReadOnlyScripts(ctx context.Context, servers ...*Server) (int64, error) {
	var n int64
	for _, s := range servers {
		if !s.Running() {
			continue
		}
		stats, err := s.CommandStats(ctx)
		if err != nil {
			return 0, err
		}
		n += stats["evalsha_ro"] + stats["eval_ro"]
	}
	return n, nil
}

// parseCommandStats reads the calls= field of every cmdstat_X entry.
func parseCommandStats(info map[string]string) (map[string]int64, error) {
	calls := make(map[string]int64, len(info))
	for k, v := range info {
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok {
			continue
		}
		for field := range strings.SplitSeq(v, ",") {
			num, ok := strings.CutPrefix(field, "calls=")
			if !ok {
				continue
			}
			n, err := strconv.ParseInt(num, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%w: %s=%q", ErrProtocol, k, v)
			}
			calls[name] = n
		}
	}
	return calls, nil
}

// ClientList returns CLIENT LIST as one field map per connection ("id",
// "addr", "name", "cmd", "ssub", "sub", …), leaving out the connection
// the harness used to ask.
func (s *Server) ClientList(ctx context.Context) ([]map[string]string, error) {
	replies, err := s.doMulti(ctx, []string{"CLIENT", "ID"}, []string{"CLIENT", "LIST"})
	if err != nil {
		return nil, fmt.Errorf("redistest: %s CLIENT LIST: %w", s.Addr(), err)
	}
	own, ok := replies[0].(int64)
	if !ok {
		return nil, fmt.Errorf("redistest: %s CLIENT ID answered %v", s.Addr(), replies[0])
	}
	text, ok := replies[1].(string)
	if !ok {
		return nil, fmt.Errorf("redistest: %s CLIENT LIST answered %v", s.Addr(), replies[1])
	}
	clients := parseClientList(text)
	ownID := strconv.FormatInt(own, 10)
	kept := clients[:0]
	for _, c := range clients {
		if c["id"] != ownID {
			kept = append(kept, c)
		}
	}
	return kept, nil
}

// parseClientList splits CLIENT LIST output: one line per client of
// space-separated key=value fields (values contain no spaces).
func parseClientList(text string) []map[string]string {
	var clients []map[string]string
	for line := range strings.Lines(text) {
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			continue
		}
		fields := make(map[string]string)
		for f := range strings.FieldsSeq(line) {
			if k, v, ok := strings.Cut(f, "="); ok {
				fields[k] = v
			}
		}
		clients = append(clients, fields)
	}
	return clients
}

// keySlotBatch is how many CLUSTER KEYSLOT commands share one round trip.
const keySlotBatch = 1000

// KeySlots asks the server for the hash slot of each key (CLUSTER KEYSLOT,
// pipelined over one connection). It needs a cluster node: a standalone
// server answers with an error. It exists to cross-check the library's own
// CRC16 against Redis.
func (s *Server) KeySlots(ctx context.Context, keys ...string) ([]uint16, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	c, err := s.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer c.close()
	slots := make([]uint16, 0, len(keys))
	cmds := make([][]string, 0, min(len(keys), keySlotBatch))
	for start := 0; start < len(keys); start += keySlotBatch {
		cmds = cmds[:0]
		for _, k := range keys[start:min(start+keySlotBatch, len(keys))] {
			cmds = append(cmds, []string{"CLUSTER", "KEYSLOT", k})
		}
		replies, err := c.do(ctx, cmds...)
		if err != nil {
			return nil, err
		}
		for i, r := range replies {
			n, ok := r.(int64)
			if !ok || n < 0 || n >= SlotCount {
				return nil, fmt.Errorf("redistest: %s CLUSTER KEYSLOT %q answered %v", s.Addr(), keys[start+i], r)
			}
			slots = append(slots, uint16(n))
		}
	}
	return slots, nil
}
