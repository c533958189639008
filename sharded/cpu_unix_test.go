//go:build unix

package sharded

import (
	"syscall"
	"time"
)

// processCPU returns the user+system CPU time this process has used
// (getrusage RUSAGE_SELF): the client's whole CPU, every goroutine and the
// runtime, not Redis's.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
