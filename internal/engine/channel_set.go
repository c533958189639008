package engine

// ChannelSet is the set of channels a broker wants on one subscribe path
// (a sharded connection, a cluster partition). Each channel carries the
// token of the last Subscribe call that asked for it, so that undoing a
// failed call removes only the channels no later call has asked for since.
// It does no locking: its owner guards it.
type ChannelSet map[string]uint64

// Missing returns the channels not in the set, once each, in input order:
// those still to be subscribed.
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

// Add puts channels in the set on behalf of the call with token, which
// becomes their last asker; call it once the call has succeeded for them.
func (s ChannelSet) Add(channels []string, token uint64) {
	for _, ch := range channels {
		s[ch] = token
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

// RemoveClaimed takes out the channels whose last asker is the call with
// token, and returns them: the undo of that call.
func (s ChannelSet) RemoveClaimed(channels []string, token uint64) []string {
	gone := make([]string, 0, len(channels))
	for _, ch := range channels {
		if t, ok := s[ch]; ok && t == token {
			delete(s, ch)
			gone = append(gone, ch)
		}
	}
	return gone
}

// Slice returns the channels in the set, in no particular order, with
// room for one more: a path's probe channel joins its wanted ones in a
// resubscribe without copying them all (see Core.Sync).
func (s ChannelSet) Slice() []string {
	out := make([]string, 0, len(s)+1)
	for ch := range s {
		out = append(out, ch)
	}
	return out
}
