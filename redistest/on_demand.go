package redistest

import (
	"fmt"
	"sync"
)

// Servers for runnable Examples. An Example has no testing.TB, so it cannot
// call StartStandalone or StartCluster, and a TestMain that started servers
// up front would make every test run of the package pay for them (a cluster
// costs about 2 s). OnDemandStandalone and OnDemandCluster start servers the
// first time an Example asks and hand out the same ones afterwards; the
// package's TestMain stops them after m.Run through StoppingOnDemand:
//
//	func TestMain(m *testing.M) {
//		goleak.VerifyTestMain(redistest.StoppingOnDemand(m))
//	}
//
// Examples share these servers one after the other, so each should use
// channel names of its own and close its brokers before it returns.
// Tests keep using StartStandalone and StartCluster.
var onDemand struct {
	mu         sync.Mutex
	standalone []string
	cluster    []string
	stops      []func()
}

// OnDemandClusterMasters and OnDemandClusterReplicas are the shape of the
// cluster OnDemandCluster starts.
const (
	OnDemandClusterMasters  = 3
	OnDemandClusterReplicas = 1
)

// OnDemandStandalone returns the addresses of n standalone servers, started
// on the first call that needs them and the same on every later call. It
// panics if a server cannot be started: an Example has no other way to fail.
func OnDemandStandalone(n int) []string {
	onDemand.mu.Lock()
	defer onDemand.mu.Unlock()
	for len(onDemand.standalone) < n {
		s, stop, err := StartSharedStandalone()
		if err != nil {
			panic(fmt.Sprintf("redistest: on-demand standalone server: %v", err))
		}
		onDemand.stops = append(onDemand.stops, stop)
		onDemand.standalone = append(onDemand.standalone, s.Addr())
	}
	return append([]string(nil), onDemand.standalone[:n]...)
}

// OnDemandCluster returns the seed addresses of a cluster of
// OnDemandClusterMasters masters with OnDemandClusterReplicas replicas each,
// started on the first call and the same on every later call. It panics if
// the cluster cannot be built.
func OnDemandCluster() []string {
	onDemand.mu.Lock()
	defer onDemand.mu.Unlock()
	if onDemand.cluster == nil {
		c, stop, err := StartSharedCluster(OnDemandClusterMasters, OnDemandClusterReplicas)
		if err != nil {
			panic(fmt.Sprintf("redistest: on-demand cluster: %v", err))
		}
		onDemand.stops = append(onDemand.stops, stop)
		onDemand.cluster = c.Seeds()
	}
	return append([]string(nil), onDemand.cluster...)
}

// TestingM is what StoppingOnDemand wraps: *testing.M, or another wrapper.
// goleak.VerifyTestMain accepts it too.
type TestingM interface {
	Run() int
}

// StoppingOnDemand returns m whose Run, after m.Run, stops every server
// OnDemandStandalone and OnDemandCluster started. Pass it to
// goleak.VerifyTestMain (the servers' process waiters are goroutines, so
// they must be gone before the leak check) or call os.Exit on its Run.
func StoppingOnDemand(m TestingM) TestingM {
	return stoppingOnDemand{m}
}

type stoppingOnDemand struct{ m TestingM }

func (s stoppingOnDemand) Run() int {
	defer stopOnDemand()
	return s.m.Run()
}

// stopOnDemand stops the on-demand servers, newest first, and forgets them.
func stopOnDemand() {
	onDemand.mu.Lock()
	defer onDemand.mu.Unlock()
	for i := len(onDemand.stops) - 1; i >= 0; i-- {
		onDemand.stops[i]()
	}
	onDemand.stops, onDemand.standalone, onDemand.cluster = nil, nil, nil
}
