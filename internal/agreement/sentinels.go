package agreement

import (
	"maps"
	"slices"
	"strings"
)

// formatSentinels writes LayoutRecord.Sentinels as the record and the
// transition keep it: a line per shard, sorted, of its entry, a space and
// its Sentinels joined by commas ("sentinel/a h1:26379,h2:26379"). No entry
// or address holds a space, a comma or a line break (redisaddr refuses
// them).
func formatSentinels(m map[string][]string) string {
	lines := make([]string, 0, len(m))
	for _, id := range slices.Sorted(maps.Keys(m)) {
		lines = append(lines, id+" "+strings.Join(m[id], ","))
	}
	return strings.Join(lines, "\n")
}

// parseSentinels reads what formatSentinels wrote; a malformed line is
// skipped (nil for none).
func parseSentinels(s string) map[string][]string {
	var m map[string][]string
	for line := range strings.Lines(s) {
		id, list, ok := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
		if !ok || id == "" || list == "" {
			continue
		}
		if m == nil {
			m = make(map[string][]string)
		}
		m[id] = strings.Split(list, ",")
	}
	return m
}
