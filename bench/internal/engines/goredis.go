package engines

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"
)

// The go-redis peer is what an application writes by hand with go-redis:
// classic PUBLISH/SUBSCRIBE on one PubSub connection (standalone), or on a
// cluster SPUBLISH/SSUBSCRIBE with a hash tag per naive partition
// ({0}..{127}) and one ClusterClient.SSubscribe PubSub per tag group.
func init() {
	register(Kind{Name: "go-redis", Peer: "github.com/redis/go-redis/v9 v9.23.0", New: newGoRedis})
	register(Kind{Name: "go-redis-cluster", Cluster: true, Peer: "github.com/redis/go-redis/v9 v9.23.0", New: newGoRedisCluster})
}

const goRedisPartitions = 128

// psub is one go-redis PubSub with a reader goroutine; subscribed counts
// the channels the server confirmed on it.
type psub struct {
	ps        *redis.PubSub
	confirmed atomic.Int64
	wanted    atomic.Int64
	done      chan struct{}
}

func startPsub(ps *redis.PubSub, recv func(ch, payload string)) *psub {
	p := &psub{ps: ps, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			m, err := ps.Receive(context.Background())
			if err != nil {
				if errors.Is(err, redis.ErrClosed) || strings.Contains(err.Error(), "closed") {
					return
				}
				continue // go-redis reconnects by itself on the next Receive
			}
			switch m := m.(type) {
			case *redis.Message:
				recv(m.Channel, m.Payload)
			case *redis.Subscription:
				p.confirmed.Store(int64(m.Count))
			}
		}
	}()
	return p
}

// wait blocks until the server confirmed every wanted channel.
func (p *psub) wait(ctx context.Context) error {
	for p.confirmed.Load() < p.wanted.Load() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("go-redis: %d of %d channels confirmed: %w", p.confirmed.Load(), p.wanted.Load(), ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

type goRedisEngine struct {
	client *redis.Client
	sub    *psub
	mu     sync.Mutex
	seen   map[string]struct{}
}

func newGoRedis(t Target, _ Tuning, recv Recv) (Engine, error) {
	if len(t.Standalone) != 1 {
		return nil, errNoTarget
	}
	c := redis.NewClient(&redis.Options{Addr: t.Standalone[0]})
	if err := c.Ping(context.Background()).Err(); err != nil {
		_ = c.Close()
		return nil, err
	}
	e := &goRedisEngine{client: c, seen: map[string]struct{}{}}
	e.sub = startPsub(c.Subscribe(context.Background()), func(ch, payload string) {
		b := bytesOf(payload)
		recv(ch, b, Stamped(b))
	})
	return e, nil
}

func (e *goRedisEngine) Publish(ctx context.Context, channel string, payload []byte) error {
	return e.client.Publish(ctx, channel, payload).Err()
}

func (e *goRedisEngine) Subscribe(ctx context.Context, channels []string) error {
	e.mu.Lock()
	var fresh []string
	for _, ch := range channels {
		if _, ok := e.seen[ch]; !ok {
			e.seen[ch] = struct{}{}
			fresh = append(fresh, ch)
		}
	}
	e.mu.Unlock()
	e.sub.wanted.Add(int64(len(fresh)))
	if err := e.sub.ps.Subscribe(ctx, fresh...); err != nil {
		return err
	}
	return e.sub.wait(ctx)
}

func (e *goRedisEngine) Close() error {
	err := e.sub.ps.Close()
	<-e.sub.done
	return errors.Join(err, e.client.Close())
}

type goRedisClusterEngine struct {
	client *redis.ClusterClient
	recv   Recv
	mu     sync.Mutex
	groups map[int]*psub
	seen   map[string]struct{}
}

func newGoRedisCluster(t Target, _ Tuning, recv Recv) (Engine, error) {
	if len(t.Cluster) == 0 {
		return nil, errNoTarget
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: t.Cluster})
	if err := c.Ping(context.Background()).Err(); err != nil {
		_ = c.Close()
		return nil, err
	}
	return &goRedisClusterEngine{client: c, recv: recv, groups: map[int]*psub{}, seen: map[string]struct{}{}}, nil
}

// naivePartition is what a hand-written client does: hash mod partitions,
// the partition number itself as the hash tag.
func naivePartition(channel string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(channel))
	return int(h.Sum32() % goRedisPartitions)
}

func wireKey(channel string) string {
	return "{" + strconv.Itoa(naivePartition(channel)) + "}" + channel
}

func (e *goRedisClusterEngine) Publish(ctx context.Context, channel string, payload []byte) error {
	return e.client.SPublish(ctx, wireKey(channel), payload).Err()
}

func (e *goRedisClusterEngine) Subscribe(ctx context.Context, channels []string) error {
	byPart := map[int][]string{}
	e.mu.Lock()
	for _, ch := range channels {
		if _, ok := e.seen[ch]; ok {
			continue
		}
		e.seen[ch] = struct{}{}
		p := naivePartition(ch)
		byPart[p] = append(byPart[p], wireKey(ch))
	}
	e.mu.Unlock()
	var touched []*psub
	for p, keys := range byPart {
		e.mu.Lock()
		g := e.groups[p]
		if g == nil {
			g = startPsub(e.client.SSubscribe(ctx), func(ch, payload string) {
				if i := strings.IndexByte(ch, '}'); i >= 0 {
					ch = ch[i+1:]
				}
				b := bytesOf(payload)
				e.recv(ch, b, Stamped(b))
			})
			e.groups[p] = g
		}
		e.mu.Unlock()
		g.wanted.Add(int64(len(keys)))
		if err := g.ps.SSubscribe(ctx, keys...); err != nil {
			return err
		}
		touched = append(touched, g)
	}
	for _, g := range touched {
		if err := g.wait(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (e *goRedisClusterEngine) Close() error {
	e.mu.Lock()
	groups := e.groups
	e.groups = map[int]*psub{}
	e.mu.Unlock()
	var errs []error
	for _, g := range groups {
		errs = append(errs, g.ps.Close())
		<-g.done
	}
	errs = append(errs, e.client.Close())
	return errors.Join(errs...)
}
