//go:build linux

package redistest

import "syscall"

// childProcAttr makes the kernel SIGKILL redis-server when the test binary
// dies (a panic, a `go test` timeout, Ctrl-C), so that no server outlives
// the run that started it even when t.Cleanup never runs.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
