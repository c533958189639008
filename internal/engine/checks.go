package engine

import (
	"context"
	"fmt"

	"github.com/shardcast/shardcast"
)

// CheckChannels is the argument check of Subscribe and Unsubscribe: it runs
// before anything is sent, so a bad call changes nothing.
func CheckChannels(ctx context.Context, closed bool, channels []string) error {
	if closed {
		return shardcast.ErrClosed
	}
	for _, ch := range channels {
		if err := shardcast.ValidateChannel(ch); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// CheckPublish is the argument check of Publish.
func CheckPublish(ctx context.Context, closed bool, channel string, payload []byte, maxPayload int) error {
	if closed {
		return shardcast.ErrClosed
	}
	if err := shardcast.ValidateChannel(channel); err != nil {
		return err
	}
	if len(payload) > maxPayload {
		return fmt.Errorf("%w: %d bytes, limit %d", shardcast.ErrPayloadTooLarge, len(payload), maxPayload)
	}
	return ctx.Err()
}

// FirstError returns the first non-nil error of a pipelined batch.
func FirstError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
