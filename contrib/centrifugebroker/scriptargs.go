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
	ends []int    // where each string ends in buf
	view []string // what strings returned last, kept for the next call
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
	clear(a.view) // the strings stay valid; the pool keeps none of them alive
	a.buf, a.ends, a.view = a.buf[:0], a.ends[:0], a.view[:0]
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

// strings returns the strings built so far, in a slice of a's own that
// is valid until release (the strings themselves stay valid): a caller
// that keeps the slice longer copies it.
func (a *scriptArgs) strings() []string {
	s := string(a.buf)
	a.view = a.view[:0]
	start := 0
	for _, e := range a.ends {
		a.view = append(a.view, s[start:e])
		start = e
	}
	return a.view
}
