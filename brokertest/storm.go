package brokertest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"go.uber.org/goleak"
)

// Storm closes brokers in the middle of a reconnect storm: their
// subscribe connections killed over and over while they resubscribe many
// channels and Subscribe calls wait for them. Run checks that every Close
// returns promptly, that every call in flight returns (with ErrClosed),
// and that no goroutine started meanwhile is left behind, once those
// that end by themselves have had leakSettle to (rueidis closes a
// cluster client's connections asynchronously, one to a frozen node a
// second after Close).
type Storm struct {
	// New builds one broker with opts; Run closes it. Its timeouts should
	// be long (see closeBound), so that a Close that waits one out fails.
	New func(opts shardcast.Options) (shardcast.Broker, error)
	// Brokers and Channels are how many brokers Run builds and how many
	// channels each subscribes before the storm.
	Brokers, Channels int
	// KillSubscribers drops every subscribe connection the servers hold
	// (CLIENT KILL TYPE pubsub on each).
	KillSubscribers func(ctx context.Context) error
	// Then, if set, ends the storm before the brokers are closed: it
	// freezes or kills the servers. Without it the brokers are closed
	// while the storm goes on.
	Then func(t *testing.T)
}

// stormRounds is how many times at least the subscribe connections are
// killed, and each broker reconnects, before Close.
const stormRounds = 10

// closeBound is how long a Close may take before Run fails it: far above
// what a Close that waits for nothing takes (milliseconds), below the
// timeouts a Close must not wait out: rueidis's 10 s write timeout, and
// the engine's own, which the brokers of a storm should set to a minute
// (DialTimeout, CommandTimeout, HealthTimeout, a cluster's SlotsTimeout).
const closeBound = 5 * time.Second

// Run runs the storm.
func (s Storm) Run(t *testing.T) {
	t.Helper()
	leaks := goleak.IgnoreCurrent()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	brokers := make([]shardcast.Broker, s.Brokers)
	var closed sync.WaitGroup // Closes that were started
	t.Cleanup(func() {
		// A failed check leaves brokers open; Close them (a hung Close
		// is already reported).
		for _, b := range brokers {
			if b != nil {
				go func() { _ = b.Close() }()
			}
		}
	})
	chans := names("storm:", s.Channels)
	for i := range brokers {
		b, err := s.New(shardcast.Options{Handler: func(shardcast.Message) {}})
		if err != nil {
			t.Fatalf("building broker %d: %v", i, err)
		}
		brokers[i] = b
		if err := b.Subscribe(ctx, chans...); err != nil {
			t.Fatalf("broker %d: Subscribe(%d channels): %v", i, len(chans), err)
		}
	}

	var kills atomic.Int64
	stopKilling := make(chan struct{})
	killed := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stopKilling:
				killed <- nil
				return
			default:
			}
			kctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := s.KillSubscribers(kctx)
			cancel()
			if err != nil {
				killed <- fmt.Errorf("killing the subscribe connections: %w", err)
				return
			}
			kills.Add(1)
			time.Sleep(2 * time.Millisecond)
		}
	}()
	endStorm := sync.OnceValue(func() error {
		close(stopKilling)
		return <-killed
	})
	defer func() { _ = endStorm() }()

	// Subscribe calls in flight: each broker keeps subscribing one more
	// channel, waiting through the reconnects, until Close.
	var calls sync.WaitGroup
	callErrs := make([]error, len(brokers))
	for i, b := range brokers {
		calls.Go(func() {
			for j := 0; ; j++ {
				err := b.Subscribe(context.Background(), "storm-call:"+strconv.Itoa(i)+":"+strconv.Itoa(j))
				if err != nil {
					if !errors.Is(err, shardcast.ErrClosed) {
						callErrs[i] = err
					}
					return
				}
			}
		})
	}

	deadline := time.Now().Add(time.Minute)
	for kills.Load() < stormRounds || !stormed(brokers) {
		if time.Now().After(deadline) {
			t.Fatalf("the brokers did not reconnect %d times each within a minute (%d kill rounds)", stormRounds, kills.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if s.Then != nil {
		if err := endStorm(); err != nil {
			t.Fatal(err)
		}
		s.Then(t)
	}

	took := make([]time.Duration, len(brokers))
	for i, b := range brokers {
		closed.Add(1)
		done := make(chan error, 1)
		began := time.Now()
		go func() {
			defer closed.Done()
			done <- b.Close()
		}()
		select {
		case err := <-done:
			took[i] = time.Since(began)
			if err != nil {
				t.Errorf("broker %d: Close: %v", i, err)
			}
		case <-time.After(closeBound):
			t.Fatalf("broker %d: Close did not return within %v; goroutines:\n%s", i, closeBound, Stacks())
		}
		brokers[i] = nil
	}
	if err := endStorm(); err != nil {
		t.Error(err)
	}
	returned := make(chan struct{})
	go func() {
		calls.Wait()
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(closeBound):
		t.Fatalf("a Subscribe call in flight did not return after Close; goroutines:\n%s", Stacks())
	}
	for i, err := range callErrs {
		if err != nil {
			t.Errorf("broker %d: a Subscribe in flight failed with %v, want success or ErrClosed", i, err)
		}
	}
	t.Logf("%d kill rounds; Close took %v", kills.Load(), took)
	closed.Wait()
	// Goroutines that end by themselves (a wire's reader after its
	// socket closed) get a moment to.
	settled := time.Now().Add(leakSettle)
	for goleak.Find(leaks) != nil && time.Now().Before(settled) {
		time.Sleep(50 * time.Millisecond)
	}
	goleak.VerifyNone(t, leaks)
}

// leakSettle is how long goroutines that end by themselves get after the
// last Close before what is left counts as leaked.
const leakSettle = 10 * time.Second

// stormed reports whether every broker reconnected stormRounds times.
func stormed(brokers []shardcast.Broker) bool {
	for _, b := range brokers {
		sr, ok := b.(StatsReporter)
		if !ok || sr.Stats().Reconnects < stormRounds {
			return false
		}
	}
	return true
}

// Stacks returns every goroutine's stack, for a failure that is a hang:
// where the call or Close waits is the diagnosis.
func Stacks() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}
