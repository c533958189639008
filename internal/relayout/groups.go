package relayout

import (
	"fmt"

	"github.com/shardcast/shardcast"
)

// TwinGroups groups channels by the paths they are wanted on during a
// re-layout: paths returns a channel's path under the layout in force and,
// when the channel moves, its path under the next layout (next < 0 when it
// does not move). Groups come in the order their paths were first met.
func TwinGroups(channels []string, paths func(channel string) (cur, next int)) []shardcast.Group {
	byPath := make(map[int][]string)
	var order []int
	add := func(p int, ch string) {
		if _, ok := byPath[p]; !ok {
			order = append(order, p)
		}
		byPath[p] = append(byPath[p], ch)
	}
	for _, ch := range channels {
		cur, next := paths(ch)
		add(cur, ch)
		if next >= 0 {
			add(next, ch)
		}
	}
	out := make([]shardcast.Group, len(order))
	for i, p := range order {
		out[i] = shardcast.Group{Key: p, Channels: byPath[p]}
	}
	return out
}

// ToGroups turns channels by path into groups, in no particular order.
func ToGroups(m map[int][]string) []shardcast.Group {
	out := make([]shardcast.Group, 0, len(m))
	for p, chans := range m {
		out = append(out, shardcast.Group{Key: p, Channels: chans})
	}
	return out
}

// checkAgreement is a coordinator's check of the agreement it was given.
func checkAgreement(a shardcast.Agreement) error {
	if err := a.Validate(); err != nil {
		return err
	}
	if a.Off {
		return fmt.Errorf("%w: a re-layout needs the agreement (Agreement.Off is set)", shardcast.ErrInvalidConfig)
	}
	return nil
}
