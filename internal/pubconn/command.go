package pubconn

import (
	"strconv"
	"strings"
	"time"

	"github.com/shardcast/shardcast/internal/resp"
)

// command is one command to encode; a value, so encoding allocates nothing.
type command struct {
	args      []string // a command of Do, or a script's ARGV (with verb)
	verb      string   // a script call: EVALSHA or EVAL, of script with keys and args
	script    string
	keys      []string
	asking    bool // ASKING goes just before the command
	uncounted bool // never counted in Published (see DoUncounted)
	ping      bool
	sharded   bool
	keyPrefix string
	channel   string
	payload   []byte
	raw       bool
	now       time.Time // the envelope's publish time
	again     bool      // a resend: now may be long past (see SPublishAgain)
	runID     bool      // a script given the wire's run_id as its last ARGV
}

// publishes reports whether the command publishes: a PUBLISH or SPUBLISH,
// or a script (which may).
func (cmd *command) publishes() bool {
	if cmd.uncounted {
		return false
	}
	if cmd.verb != "" {
		return true // a script, which may publish
	}
	if cmd.args != nil {
		name := strings.ToUpper(cmd.args[0])
		return strings.HasPrefix(name, "EVAL") || name == "SPUBLISH" || name == "PUBLISH"
	}
	return !cmd.ping
}

// replied reports whether the command's reply is a value for its caller
// (a command of Do or a script), not a publish's count.
func (cmd *command) replied() bool { return cmd.args != nil || cmd.verb != "" }

func (cmd *command) append(b []byte, run string) []byte {
	if cmd.verb != "" {
		extra := 0
		if cmd.runID {
			extra = 1
		}
		b = resp.AppendHeader(b, '*', 3+len(cmd.keys)+len(cmd.args)+extra)
		b = resp.AppendBulk(b, cmd.verb)
		b = resp.AppendBulk(b, cmd.script)
		var n [20]byte
		b = resp.AppendBulkBytes(b, strconv.AppendInt(n[:0], int64(len(cmd.keys)), 10))
		for _, k := range cmd.keys {
			b = resp.AppendBulk(b, k)
		}
		for _, a := range cmd.args {
			b = resp.AppendBulk(b, a)
		}
		if cmd.runID {
			b = resp.AppendBulk(b, run)
		}
		return b
	}
	if cmd.args != nil {
		return resp.AppendCommand(b, cmd.args[0], cmd.args[1:])
	}
	if cmd.ping {
		return append(b, "*1\r\n$4\r\nPING\r\n"...)
	}
	return appendPublish(b, cmd.sharded, cmd.keyPrefix, cmd.channel, cmd.payload, cmd.raw, cmd.now)
}
