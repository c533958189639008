package pubconn

import (
	"context"
	"fmt"
	"time"
)

// wire returns the live connection, dialling one if there is none. Callers
// that arrive during a dial wait for it; waited reports that this call
// dialled or waited for a dial.
func (p *Pub) wire(ctx context.Context) (_ *wire, waited bool, _ error) {
	if w := p.cur.Load(); w != nil {
		return w, false, nil
	}
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, waited, ErrClosed
		}
		if p.w != nil {
			w := p.w
			p.mu.Unlock()
			return w, waited, nil
		}
		if p.dialing == nil && p.lastDialErr != nil && time.Now().Before(p.redialAt) {
			err := p.lastDialErr
			p.mu.Unlock()
			return nil, waited, err
		}
		if ch := p.dialing; ch != nil {
			waited = true
			p.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return nil, waited, ctx.Err()
			}
			p.mu.Lock()
			err := p.dialErr
			p.mu.Unlock()
			if err != nil {
				return nil, waited, err
			}
			continue
		}
		waited = true
		ch := make(chan struct{})
		dctx, cancel := context.WithCancel(ctx)
		p.dialing, p.cancelDial = ch, cancel
		p.mu.Unlock()
		w, err := p.open(dctx)
		cancel()
		p.mu.Lock()
		p.dialing, p.cancelDial, p.dialErr = nil, nil, err
		switch {
		case p.closed:
			if err == nil {
				_ = w.nc.Close()
			}
			err, p.dialErr = ErrClosed, ErrClosed
		case err == nil:
			p.w = w
			p.cur.Store(w)
			p.lastDialErr = nil
			p.wires.Add(1)
			go p.read(w)
		case ctxErr(ctx) != nil:
			// This caller's ctx ended the dial; those waiting for it
			// have ctxs of their own and dial again.
			p.dialErr = nil
		default:
			p.lastDialErr, p.redialAt = err, time.Now().Add(p.t.Redial)
		}
		p.mu.Unlock()
		close(ch)
		if err != nil {
			return nil, waited, err
		}
		return w, waited, nil
	}
}

// open dials and authenticates a new wire.
func (p *Pub) open(ctx context.Context) (*wire, error) {
	nc, err := p.dial.Dial(ctx)
	if err != nil {
		// Report ctx's end as such, not as the i/o timeout of the socket
		// deadline taken from it.
		if cerr := ctxErr(ctx); cerr != nil {
			err = cerr
		}
		return nil, fmt.Errorf("pubconn: dial %s: %w", p.dial.Addr, err)
	}
	// Login reports ctx's end as such itself.
	if err := p.dial.Login(ctx, nc); err != nil {
		_ = nc.Close()
		return nil, fmt.Errorf("pubconn: auth on %s: %w", p.dial.Addr, err)
	}
	w := &wire{nc: nc, onStall: p.onStall}
	if p.onStall != nil {
		w.stall = p.t.Stall
	}
	return w, nil
}

// ctxErr is ctx.Err(), or DeadlineExceeded once ctx's deadline has passed:
// a socket deadline taken from ctx can fire before ctx's own timer does.
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}
