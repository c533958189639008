package engine

import (
	"context"
	"strconv"
	"strings"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/pubconn"
	"github.com/shardcast/shardcast/internal/resp"
)

// Eval runs s on pub's server with EVALSHA, and with EVAL when the server
// answers NOSCRIPT (it then knows the script for later calls on any
// connection, until its script cache is flushed or it restarts).
func Eval(ctx context.Context, pub *pubconn.Pub, s *shardcast.Script, keys, args []string) (any, error) {
	return eval(ctx, pub.Do, s, keys, args)
}

// EvalAsking is Eval with ASKING before each command (see
// pubconn.Pub.DoAsking): a script redirected with ASK, resent to the node
// importing its slot.
func EvalAsking(ctx context.Context, pub *pubconn.Pub, s *shardcast.Script, keys, args []string) (any, error) {
	return eval(ctx, pub.DoAsking, s, keys, args)
}

// EvalUncounted is Eval (EvalAsking when asking) for a script of the
// library's own housekeeping, not counted in the connection's Published.
func EvalUncounted(ctx context.Context, pub *pubconn.Pub, asking bool, s *shardcast.Script, keys, args []string) (any, error) {
	return eval(ctx, func(ctx context.Context, cmd ...string) (any, error) {
		return pub.DoUncounted(ctx, asking, cmd...)
	}, s, keys, args)
}

func eval(ctx context.Context, do func(context.Context, ...string) (any, error), s *shardcast.Script, keys, args []string) (any, error) {
	cmd := evalArgs("EVALSHA", s.SHA(), keys, args)
	v, err := do(ctx, cmd...)
	if IsNoScript(err) {
		cmd[1] = s.Source()
		cmd[0] = "EVAL"
		v, err = do(ctx, cmd...)
	}
	return v, err
}

func evalArgs(verb, script string, keys, args []string) []string {
	cmd := make([]string, 0, 3+len(keys)+len(args))
	cmd = append(cmd, verb, script, strconv.Itoa(len(keys)))
	cmd = append(cmd, keys...)
	return append(cmd, args...)
}

// IsNoScript reports whether err is Redis's NOSCRIPT reply: the server
// does not have the script in its cache.
func IsNoScript(err error) bool {
	if err == nil {
		return false // the common case, without IsServerError's errors.As target
	}
	se, ok := resp.IsServerError(err)
	return ok && strings.HasPrefix(se.Msg, "NOSCRIPT")
}
