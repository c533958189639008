//go:build !linux

package main

import "syscall"

// childProcAttr leaves a server in the demo's process group: Ctrl-C reaches
// both, and the demo still stops every server it started on its way out.
func childProcAttr() *syscall.SysProcAttr { return nil }
