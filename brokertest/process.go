package brokertest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Process is a broker running in another process, to be killed without
// Close: the test binary run again with only one test, which starts the
// broker, calls Ready and blocks (see InProcess).
type Process struct {
	// ID is the word the child passed to Ready.
	ID   string
	cmd  *exec.Cmd
	read chan struct{} // closed when the child's output is read to the end
}

// processEnv tells a run of the test binary that it is a child of
// StartProcess, and carries its argument.
const processEnv = "SHARDCAST_TEST_PROCESS_ARG"

// StartProcess runs test (a test function's name) of the current test
// binary in a new process with arg, and returns once the child called
// Ready (failing t if it exits first or takes over a minute). The child is
// killed when t ends, if it still runs.
func StartProcess(t *testing.T, test, arg string) *Process {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1", "-test.v=false")
	cmd.Env = append(os.Environ(), processEnv+"="+arg)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Process{cmd: cmd, read: make(chan struct{})}
	t.Cleanup(p.Kill)
	ready := make(chan string, 1)
	go func() {
		defer close(p.read)
		defer close(ready)
		lines := bufio.NewScanner(out)
		for lines.Scan() {
			if id, ok := strings.CutPrefix(lines.Text(), "READY "); ok {
				ready <- id
				break
			}
			t.Logf("child: %s", lines.Text())
		}
		// Drain until the child exits, so that it never blocks on a
		// full pipe.
		for lines.Scan() {
		}
	}()
	select {
	case id, ok := <-ready:
		if !ok {
			t.Fatalf("the child running %s exited before it was ready", test)
		}
		p.ID = id
	case <-time.After(time.Minute):
		t.Fatalf("the child running %s was not ready within a minute", test)
	}
	return p
}

// Kill kills the child with SIGKILL, as a crash would, and waits for it.
// It is idempotent.
func (p *Process) Kill() {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.read // the killed child's end of the pipe is closed
	_ = p.cmd.Wait()
}

// InProcess returns the argument StartProcess passed to this process, and
// whether it is such a child; a test that serves as a child skips itself
// otherwise.
func InProcess() (arg string, ok bool) {
	return os.LookupEnv(processEnv)
}

// Ready tells the parent the child's broker runs, naming it by id, and
// blocks until the parent kills the process.
func Ready(id string) {
	fmt.Printf("READY %s\n", id)
	time.Sleep(time.Hour)
}
