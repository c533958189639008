package redistest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
)

// Client ports are drawn from [portMin, portMax). A cluster node also
// listens on port+busPortOffset, and both must stay below the kernel's
// ephemeral range (32768 on Linux) so that outgoing connections of any
// process cannot take them between our probe and the server's bind.
const (
	portMin       = 10000
	portMax       = 22000
	busPortOffset = 10000
	portAttempts  = 200
)

// errNoFreePort is returned when no usable port pair was found.
var errNoFreePort = errors.New("redistest: no free port pair in 10000-21999 (+10000)")

// portReservation holds a client port and its bus port for this process:
// other processes using this package skip locked ports, and the lock goes
// away with the process if it dies, so a crashed test run leaves nothing
// that blocks the next.
type portReservation struct {
	port    int
	unlocks []func()
}

// release gives the ports back. It is idempotent.
func (r *portReservation) release() {
	for _, unlock := range r.unlocks {
		unlock()
	}
	r.unlocks = nil
}

// reservePort picks a random port p such that p and p+10000 are neither
// locked by another user of this package nor bound by anyone on 127.0.0.1.
// A process outside this package may still bind the port before
// redis-server does; starting a server therefore retries on a new port.
func reservePort() (*portReservation, error) {
	return reservePortFrom(func() int { return portMin + rand.IntN(portMax-portMin) })
}

// reservePortFrom is reservePort with the candidate ports drawn from next.
func reservePortFrom(next func() int) (*portReservation, error) {
	for range portAttempts {
		p := next()
		res := &portReservation{port: p}
		ok := true
		for _, q := range []int{p, p + busPortOffset} {
			unlock, locked, err := lockPort(q)
			if err != nil {
				res.release()
				return nil, err
			}
			if !locked {
				ok = false
				break
			}
			res.unlocks = append(res.unlocks, unlock)
		}
		if ok && portFree(p) && portFree(p+busPortOffset) {
			return res, nil
		}
		res.release()
	}
	return nil, errNoFreePort
}

// portFree reports whether 127.0.0.1:port can be listened on right now.
func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	if err := l.Close(); err != nil {
		return false
	}
	return true
}

func lockDirError(err error) error {
	return fmt.Errorf("redistest: port lock directory: %w", err)
}
