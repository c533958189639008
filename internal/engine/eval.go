package engine

import (
	"context"
	"strings"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/pubconn"
	"github.com/shardcast/shardcast/internal/resp"
)

// Eval runs s on pub's server with EVALSHA, and with EVAL when the server
// answers NOSCRIPT (it then knows the script for later calls on any
// connection, until its script cache is flushed or it restarts).
func Eval(ctx context.Context, pub *pubconn.Pub, s *shardcast.Script, keys, args []string) (any, error) {
	return eval(ctx, pub, false, false, s, keys, args)
}

// EvalAsking is Eval with ASKING before each command (see
// pubconn.Pub.DoAsking): a script redirected with ASK, resent to the node
// importing its slot.
func EvalAsking(ctx context.Context, pub *pubconn.Pub, s *shardcast.Script, keys, args []string) (any, error) {
	return eval(ctx, pub, true, false, s, keys, args)
}

// EvalUncounted is Eval (EvalAsking when asking) for a script of the
// library's own housekeeping, not counted in the connection's Published.
func EvalUncounted(ctx context.Context, pub *pubconn.Pub, asking bool, s *shardcast.Script, keys, args []string) (any, error) {
	return eval(ctx, pub, asking, true, s, keys, args)
}

func eval(ctx context.Context, pub *pubconn.Pub, asking, uncounted bool, s *shardcast.Script, keys, args []string) (any, error) {
	v, err := pub.Script(ctx, asking, uncounted, s.RunID(), "EVALSHA", s.SHA(), keys, args)
	if IsNoScript(err) {
		v, err = pub.Script(ctx, asking, uncounted, s.RunID(), "EVAL", s.Source(), keys, args)
	}
	return v, err
}

// IsNoScript reports whether err is Redis's NOSCRIPT reply: the server
// does not have the script in its cache. It matches the server's own
// message, not only the code: a script that ran can reply an error of its
// own that starts with NOSCRIPT, and running it again with EVAL would run
// it twice.
func IsNoScript(err error) bool {
	if err == nil {
		return false // the common case, without IsServerError's errors.As target
	}
	se, ok := resp.IsServerError(err)
	return ok && strings.HasPrefix(se.Msg, noScriptReply)
}

// noScriptReply is how Redis (and Valkey) answer EVALSHA of a script not in
// their cache.
const noScriptReply = "NOSCRIPT No matching script"
