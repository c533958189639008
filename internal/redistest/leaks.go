package redistest

import "go.uber.org/goleak"

// RueidisLeaks are the goleak options that exempt the two goroutines a
// rueidis cluster client may leave running after Close. Both are owned by
// rueidis, have no stop path and end on their own: after a slot-map
// refresh it closes the connections to nodes that left its map 5 s later
// (replicas given as seeds are such nodes), and a MOVED reply schedules a
// refresh after a short delay.
func RueidisLeaks() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"),
	}
}
