package redistest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// instance is one way of running a redis-server: a child process (the
// default) or a container (docker.go). Server serialises calls to it.
type instance interface {
	// start launches the server; it does not wait until it answers.
	start() error
	// exited is closed when the run launched by the last start has ended.
	// A nil channel means exit cannot be observed (containers).
	exited() <-chan struct{}
	// kill stops the server with SIGKILL and returns once it is gone.
	kill() error
	// terminate asks the server to shut down (SIGTERM), falling back to
	// kill, and returns once it is gone.
	terminate() error
	// pause freezes the server (SIGSTOP); resume thaws it (SIGCONT).
	pause() error
	resume() error
	// pid is the server's process ID on this machine, 0 when not running.
	pid() int
	// describe gives the exit status and the tail of the server's log, for
	// failure messages.
	describe() string
	// close releases what start acquired; the server must be stopped.
	close()
}

// errExitTimeout reports a process that did not go away after SIGKILL.
var errExitTimeout = errors.New("redistest: redis-server did not exit")

// exitWait bounds how long we wait for a signalled process to be reaped.
const exitWait = 10 * time.Second

// processInstance runs redis-server as a child process of the test binary,
// in the foreground (--daemonize no), so its PID is known exactly and only
// that PID is ever signalled.
type processInstance struct {
	bin     string
	args    []string
	dir     string
	outPath string // stdout+stderr: config errors appear here before --logfile is open
	logPath string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
}

func newProcessInstance(bin, dir string, args []string) *processInstance {
	return &processInstance{
		bin:     bin,
		args:    args,
		dir:     dir,
		outPath: filepath.Join(dir, "stdout.log"),
		logPath: filepath.Join(dir, "redis.log"),
	}
}

func (p *processInstance) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done != nil {
		select {
		case <-p.done:
		default:
			return errors.New("redistest: redis-server already running")
		}
	}
	out, err := os.OpenFile(p.outPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("redistest: open output file: %w", err)
	}
	// An *os.File as Stdout/Stderr is handed to the child directly, so
	// exec starts no copying goroutine that could outlive the test.
	cmd := exec.Command(p.bin, p.args...)
	cmd.Dir = p.dir
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = childProcAttr()
	err = cmd.Start()
	_ = out.Close()
	if err != nil {
		return fmt.Errorf("redistest: start %s: %w", p.bin, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.waitErr = cmd, done, nil
	// The one goroutine per run: it reaps the child and ends with it.
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.waitErr = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

func (p *processInstance) exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		closed := make(chan struct{})
		close(closed)
		return closed
	}
	return p.done
}

// signal sends sig to the current run if it is still alive.
func (p *processInstance) signal(sig syscall.Signal) (alive bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return false, nil
	}
	select {
	case <-p.done:
		return false, nil
	default:
	}
	// The child is not reaped before done is closed, so the PID cannot
	// have been reused by an unrelated process.
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return true, fmt.Errorf("redistest: signal %v to pid %d: %w", sig, p.cmd.Process.Pid, err)
	}
	return true, nil
}

func (p *processInstance) waitExit(timeout time.Duration) error {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.exited():
		return nil
	case <-timer.C:
		return fmt.Errorf("%w within %v (pid %d)", errExitTimeout, timeout, p.pid())
	}
}

func (p *processInstance) kill() error {
	alive, err := p.signal(syscall.SIGKILL)
	if err != nil || !alive {
		return err
	}
	return p.waitExit(exitWait)
}

func (p *processInstance) terminate() error {
	alive, err := p.signal(syscall.SIGTERM)
	if err != nil || !alive {
		return err
	}
	// A stopped process only acts on SIGTERM once continued.
	if _, err := p.signal(syscall.SIGCONT); err != nil {
		return err
	}
	if p.waitExit(exitWait) == nil {
		return nil
	}
	return p.kill()
}

func (p *processInstance) pause() error {
	alive, err := p.signal(syscall.SIGSTOP)
	if err == nil && !alive {
		err = ErrNotRunning
	}
	return err
}

func (p *processInstance) resume() error {
	alive, err := p.signal(syscall.SIGCONT)
	if err == nil && !alive {
		err = ErrNotRunning
	}
	return err
}

func (p *processInstance) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return 0
	}
	select {
	case <-p.done:
		return 0
	default:
		return p.cmd.Process.Pid
	}
}

func (p *processInstance) describe() string {
	p.mu.Lock()
	status := "running"
	if p.done == nil {
		status = "never started"
	} else {
		select {
		case <-p.done:
			status = fmt.Sprintf("exited: %v", p.waitErr)
			if p.waitErr == nil {
				status = "exited: status 0"
			}
		default:
		}
	}
	p.mu.Unlock()
	return fmt.Sprintf("%s\n--- %s (tail) ---\n%s--- %s (tail) ---\n%s", status,
		filepath.Base(p.outPath), fileTail(p.outPath, 10),
		filepath.Base(p.logPath), fileTail(p.logPath, 25))
}

func (p *processInstance) close() {}

// lostPort reports whether the last run failed because its port was bound
// by someone else.
func (p *processInstance) lostPort() bool {
	for _, path := range []string{p.outPath, p.logPath} {
		if data, err := os.ReadFile(path); err == nil && bytes.Contains(data, []byte("Address already in use")) {
			return true
		}
	}
	return false
}

// fileTail returns the last n lines of a file, or a note why it cannot.
func fileTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)\n", err)
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines) > 0 && len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	out := string(bytes.Join(lines, nil))
	if out != "" && out[len(out)-1] != '\n' {
		out += "\n"
	}
	return out
}
