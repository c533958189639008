//go:build linux

package main

import "syscall"

// childProcAttr puts a server in a process group of its own, so that Ctrl-C
// in the terminal reaches only the chat server, which then stops the servers in
// order; and has the kernel kill it if the chat server dies without cleaning up.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
