package engine

import "sync"

// Background runs work that outlives the call that started it (an undo
// finishing after its caller's ctx ended) on goroutines a broker's Close
// waits for. The zero value is ready to use.
type Background struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// Go runs f on a new goroutine and reports true, or reports false without
// running f once Close has begun.
func (g *Background) Go(f func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		f()
	}()
	return true
}

// Close refuses new work and waits for the running goroutines.
func (g *Background) Close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.wg.Wait()
}
