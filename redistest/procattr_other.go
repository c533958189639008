//go:build !linux

package redistest

import "syscall"

// childProcAttr: without Pdeathsig, servers are only stopped by t.Cleanup.
func childProcAttr() *syscall.SysProcAttr { return nil }
