package engine

// ChannelSet is the set of channels a broker wants on one subscribe path
// (a sharded connection, a cluster partition). It does no locking: its
// owner guards it.
type ChannelSet map[string]struct{}

// Missing returns the channels not in the set, once each, in input order.
func (s ChannelSet) Missing(channels []string) []string {
	out := make([]string, 0, len(channels))
	seen := make(map[string]struct{}, len(channels))
	for _, ch := range channels {
		if _, ok := s[ch]; ok {
			continue
		}
		if _, dup := seen[ch]; dup {
			continue
		}
		seen[ch] = struct{}{}
		out = append(out, ch)
	}
	return out
}

// Add puts channels in the set.
func (s ChannelSet) Add(channels []string) {
	for _, ch := range channels {
		s[ch] = struct{}{}
	}
}

// Remove takes channels out of the set and returns those that were in it.
func (s ChannelSet) Remove(channels []string) []string {
	gone := make([]string, 0, len(channels))
	for _, ch := range channels {
		if _, ok := s[ch]; ok {
			delete(s, ch)
			gone = append(gone, ch)
		}
	}
	return gone
}

// Slice returns the channels in the set, in no particular order.
func (s ChannelSet) Slice() []string {
	out := make([]string, 0, len(s))
	for ch := range s {
		out = append(out, ch)
	}
	return out
}
