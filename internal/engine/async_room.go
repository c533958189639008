package engine

import (
	"context"
	"fmt"
	"sync"

	"github.com/shardcast/shardcast"
)

// AsyncRoom is a broker's bound on the messages of PublishAsync in
// flight: a token per message, taken before it is queued and given back
// when its outcome is known. It is made on first use, sized by
// Options.MaxAsyncPublishes. The zero value is ready to use.
type AsyncRoom struct {
	once   sync.Once
	tokens chan struct{}
}

// Take waits for room for one message, bounded by ctx and by closing;
// limit is the broker's Options.MaxAsyncPublishes.
func (r *AsyncRoom) Take(ctx context.Context, limit int, closing <-chan struct{}) error {
	r.once.Do(func() { r.tokens = make(chan struct{}, limit) })
	select {
	case r.tokens <- struct{}{}:
		return nil
	default:
	}
	select {
	case r.tokens <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("shardcast: publish: no room among %d messages in flight (%w): %w", limit, shardcast.ErrNotSent, ctx.Err())
	case <-closing:
		return shardcast.ErrClosed
	}
}

// Give returns the room of one message.
func (r *AsyncRoom) Give() { <-r.tokens }
