//go:build linux

package localredis

import "syscall"

// childProcAttr puts a server in a process group of its own, so that Ctrl-C
// in the terminal reaches only the program, which then stops the servers in
// order; and has the kernel kill it if the program dies without cleaning up.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
