//go:build !linux

package localredis

import "syscall"

// childProcAttr leaves a server in the program's process group: Ctrl-C reaches
// both, and the program still stops every server it started on its way out.
func childProcAttr() *syscall.SysProcAttr { return nil }
