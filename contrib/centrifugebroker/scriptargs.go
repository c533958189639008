package centrifugebroker

import (
	"strconv"
	"sync"
)

// scriptArgs builds the keys and arguments of one script call in one
// buffer, then cuts them all from one string: a publish with history
// passes 15 strings, and building each on its own (keys concatenated,
// numbers formatted, the publication converted) cost more allocations
// than the rest of the publish.
type scriptArgs struct {
	buf  []byte
	ends []int // where each string ends in buf
}

var scriptArgsPool = sync.Pool{New: func() any { return new(scriptArgs) }}

// maxPooledScriptArgs is the largest buffer kept in scriptArgsPool.
const maxPooledScriptArgs = 64 << 10

func getScriptArgs() *scriptArgs { return scriptArgsPool.Get().(*scriptArgs) }

// release returns a to the pool; the strings it built stay valid.
func (a *scriptArgs) release() {
	if cap(a.buf) > maxPooledScriptArgs {
		return
	}
	a.buf, a.ends = a.buf[:0], a.ends[:0]
	scriptArgsPool.Put(a)
}

// end ends the string being built: what was appended to buf since the
// previous end.
func (a *scriptArgs) end() { a.ends = append(a.ends, len(a.buf)) }

// add appends one string made of parts.
func (a *scriptArgs) add(parts ...string) {
	for _, s := range parts {
		a.buf = append(a.buf, s...)
	}
	a.end()
}

// addUint appends n in decimal.
func (a *scriptArgs) addUint(n uint64) {
	a.buf = strconv.AppendUint(a.buf, n, 10)
	a.end()
}

// strings returns the strings built so far.
func (a *scriptArgs) strings() []string {
	s := string(a.buf)
	out := make([]string, len(a.ends))
	start := 0
	for i, e := range a.ends {
		out[i] = s[start:e]
		start = e
	}
	return out
}
