package engine

import (
	"context"
	"strings"
	"sync"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/pubconn"
	"github.com/shardcast/shardcast/internal/resp"
	"github.com/shardcast/shardcast/internal/subconn"
)

// EvalRO runs the read-only script s on at, a connection to the node
// the broker subscribes channel on when that is not its master, with
// EVALSHA_RO (EVAL_RO on NOSCRIPT). With at nil, or when at's node cannot
// answer for the channel now (unreachable, loading, redirecting it
// elsewhere), the script runs as Eval does, on the master. A replica
// answers from what it has replicated so far.
func (p *Publisher[R, D]) EvalRO(ctx context.Context, channel string, at *pubconn.Pub, s *shardcast.Script, keys, args []string) (any, error) {
	if at != nil {
		if err := p.core.CheckChannel(ctx, channel); err != nil {
			return nil, err
		}
		v, err := evalRO(ctx, at, s, keys, args)
		if err == nil || !readElsewhere(err) {
			return v, err
		}
		if p.core.Closed() {
			return nil, shardcast.ErrClosed
		}
		if ctx.Err() != nil {
			return nil, err
		}
	}
	return p.Eval(ctx, channel, s, keys, args...)
}

// evalRO is Eval's EVALSHA-then-EVAL with the read-only verbs, which a
// replica takes, not counted in pub's Published.
func evalRO(ctx context.Context, pub *pubconn.Pub, s *shardcast.Script, keys, args []string) (any, error) {
	v, err := pub.Script(ctx, false, true, s.RunID(), "EVALSHA_RO", s.SHA(), keys, args)
	if IsNoScript(err) {
		v, err = pub.Script(ctx, false, true, s.RunID(), "EVAL_RO", s.Source(), keys, args)
	}
	return v, err
}

// readElsewhere reports whether a read that failed with err on a replica
// may be asked of the master instead: the replica was not reached or did
// not answer, or it refused for its role or state (a redirection, a
// load, a link to its master down), not for the script.
func readElsewhere(err error) bool {
	se, ok := resp.IsServerError(err)
	if !ok {
		return true
	}
	code, _, _ := strings.Cut(se.Msg, " ")
	switch code {
	case "MOVED", "ASK", "LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN":
		return true
	}
	return false
}

// Readers holds a broker's connections for EvalRO to the nodes other
// than masters it subscribes on, one per node, dialled on first use.
// The zero value is ready; Timeouts must be set before the first For.
type Readers struct {
	Timeouts pubconn.Timeouts

	mu     sync.Mutex
	conns  map[string]*pubconn.Pub
	closed bool
}

// For returns the connection to d's node, made the first time (it dials
// when first used); nil once Close was called.
func (r *Readers) For(d subconn.Dialer) *pubconn.Pub {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	pub := r.conns[d.Addr]
	if pub == nil {
		if r.conns == nil {
			r.conns = make(map[string]*pubconn.Pub)
		}
		pub = pubconn.New(d, r.Timeouts)
		r.conns[d.Addr] = pub
	}
	return pub
}

// Keep closes the connections to the nodes keep reports false for: nodes
// the broker no longer subscribes on. A read in flight on one fails and
// goes to the master.
func (r *Readers) Keep(keep func(addr string) bool) {
	r.mu.Lock()
	var gone []*pubconn.Pub
	for addr, pub := range r.conns {
		if !keep(addr) {
			delete(r.conns, addr)
			gone = append(gone, pub)
		}
	}
	r.mu.Unlock()
	for _, pub := range gone {
		pub.Close()
	}
}

// Close closes every connection; later For calls return nil.
func (r *Readers) Close() {
	r.mu.Lock()
	r.closed = true
	conns := r.conns
	r.conns = nil
	r.mu.Unlock()
	for _, pub := range conns {
		pub.Close()
	}
}
