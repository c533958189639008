// Package engines puts shardcast and its peers behind one small interface
// so every scenario drives them the same way.
package engines

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Recv is called for every delivered message. sentAt is the publish time
// the engine reports (shardcast: Message.PublishedAt) or, for peers, the
// time embedded in the first 8 bytes of the payload by Stamp. It may be
// called concurrently.
type Recv func(channel string, payload []byte, sentAt time.Time)

// Engine is what a scenario needs from a broker: one instance both
// publishes and subscribes, as one application node would.
type Engine interface {
	Publish(ctx context.Context, channel string, payload []byte) error
	// Subscribe returns once the engine says every channel is subscribed.
	Subscribe(ctx context.Context, channels []string) error
	Close() error
}

// Target says which Redis an engine talks to.
type Target struct {
	Standalone []string // isolated instances (one for the peers)
	Cluster    []string // seed nodes of a Redis Cluster
}

// Tuning carries knobs a run may override; zero means the engine's default.
type Tuning struct {
	Workers int // shardcast only
	// SubscribeBatch is shardcast's Options.SubscribeBatch.
	SubscribeBatch int
	// ReusePayloads is shardcast's Options.ReusePayloads: the Recv must
	// keep no payload after it returns.
	ReusePayloads bool
	// OnEvent receives shardcast events (resubscribe scenario).
	OnEvent func(kind string, at time.Time)
	// Stats, when set, is filled with a function that returns the shardcast
	// broker's channel count and reconnects (resubscribe scenario).
	Stats *func() (channels int, reconnects uint64)
}

// Kind is one engine a scenario can run.
type Kind struct {
	Name    string
	Cluster bool   // needs a Redis Cluster target
	Peer    string // "" for shardcast, else the peer's module@version
	New     func(t Target, tu Tuning, recv Recv) (Engine, error)
}

var kinds = map[string]Kind{}

func register(k Kind) { kinds[k.Name] = k }

// Lookup returns the kind named name.
func Lookup(name string) (Kind, error) {
	k, ok := kinds[name]
	if !ok {
		return Kind{}, fmt.Errorf("unknown engine %q (have %s)", name, strings.Join(Names(), ", "))
	}
	return k, nil
}

// Names lists every engine, sorted.
func Names() []string {
	var out []string
	for n := range kinds {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Stamp writes t into the first 8 bytes of payload (which must hold 8).
func Stamp(payload []byte, t time.Time) {
	binary.LittleEndian.PutUint64(payload, uint64(t.UnixNano()))
}

// Stamped reads the time Stamp wrote, or the zero time.
func Stamped(payload []byte) time.Time {
	if len(payload) < 8 {
		return time.Time{}
	}
	return time.Unix(0, int64(binary.LittleEndian.Uint64(payload)))
}

// errNoTarget is returned when an engine gets the wrong kind of target.
var errNoTarget = errors.New("engines: target lacks the servers this engine needs")
