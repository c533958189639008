package pubconn

import (
	"context"
	"errors"
	"strings"

	"github.com/shardcast/shardcast/internal/resp"
)

// Do sends one command (args[0] is its name) through the pipeline and
// returns its reply as resp.Reader.Reply decodes it: string, int64, nil,
// []any; an error reply is returned as the error (a *resp.ServerError).
func (p *Pub) Do(ctx context.Context, args ...string) (any, error) {
	if len(args) == 0 {
		return nil, errors.New("pubconn: empty command")
	}
	return p.do(ctx, command{args: args})
}

// DoAsking is Do with ASKING sent just before the command, in the same
// write, so that no other command comes between them: the way to resend a
// command Redis Cluster redirected with ASK (a slot being migrated) to the
// node named. ASKING's own reply is not returned; were it refused, the
// command would meet a redirection of its own.
func (p *Pub) DoAsking(ctx context.Context, args ...string) (any, error) {
	if len(args) == 0 {
		return nil, errors.New("pubconn: empty command")
	}
	return p.do(ctx, command{args: args, asking: true})
}

// DoUncounted is Do (DoAsking when asking) for a command of the library's
// own housekeeping, which Published must not count even when it is a
// script.
func (p *Pub) DoUncounted(ctx context.Context, asking bool, args ...string) (any, error) {
	if len(args) == 0 {
		return nil, errors.New("pubconn: empty command")
	}
	return p.do(ctx, command{args: args, asking: asking, uncounted: true})
}

// Script sends a script call, verb ("EVALSHA" or "EVAL") with script
// (its SHA1 or its source), keys and args, through the pipeline like Do,
// without building the command's arguments first: a call allocates
// nothing of its own. asking sends ASKING just before it (see DoAsking);
// uncounted keeps it out of Published (see DoUncounted); runID adds one
// more argument, last: the run_id of the server the wire reaches (see
// learnRunID), learned with INFO server before the wire's first such call.
func (p *Pub) Script(ctx context.Context, asking, uncounted, runID bool, verb, script string, keys, args []string) (any, error) {
	return p.do(ctx, command{verb: verb, script: script, keys: keys, args: args, asking: asking, uncounted: uncounted, runID: runID})
}

// learnRunID teaches w its server, for the scripts that ask for it (see
// Script): the run_id INFO server reports, which a server draws anew each
// time it starts. A wire reaches one server process for its
// whole life (a restarted server is a new wire), so a run_id learned
// once per wire is right for every call on it. A server that does not
// answer INFO (a user without its permission) gives "".
func (p *Pub) learnRunID(ctx context.Context, w *wire) error {
	w.mu.Lock()
	known := w.runKnown
	w.mu.Unlock()
	if known {
		return nil
	}
	c, err := p.queue(ctx, w, command{args: infoServer}, nil, false)
	if err != nil {
		return err
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		return ctx.Err() // the reply may still come: c stays with the wire
	}
	value, err := c.value, c.err
	c.err, c.value = nil, nil
	calls.Put(c)
	id := ""
	if err != nil {
		// Only a lasting refusal makes the run_id unknown for the wire's
		// life: a user without the permission, a server with INFO
		// renamed away. Anything else (LOADING, a failed wire) is the
		// call's error, and the next call asks again.
		se, refused := resp.IsServerError(err)
		if !refused || !(strings.HasPrefix(se.Msg, "NOPERM") || strings.HasPrefix(se.Msg, "ERR unknown command")) {
			return err
		}
	}
	if text, ok := value.(string); ok {
		id = runIDOf(text)
	}
	w.mu.Lock()
	w.runID, w.runKnown = id, true
	w.mu.Unlock()
	return nil
}

// infoServer is the command learnRunID sends.
var infoServer = []string{"INFO", "server"}

// runIDOf returns the run_id field of INFO server's reply, "" if none.
func runIDOf(info string) string {
	_, rest, ok := strings.Cut(info, "run_id:")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, "\n")
	return strings.TrimSpace(id)
}
