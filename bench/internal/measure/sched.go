package measure

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Sched returns how long the threads of process pid have run on a CPU
// and how long they have waited, runnable, in the kernel's run queue for
// one (the first two fields of /proc/PID/task/*/schedstat, summed over the
// threads alive now). Wait that grows as fast as the clock means the
// process was short of CPU, whatever its own CPU time says.
func Sched(pid int) (run, wait time.Duration, err error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		return 0, 0, fmt.Errorf("schedstat of pid %d: no tasks (%v)", pid, err)
	}
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // a thread that ended since the glob
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			continue
		}
		r, err1 := strconv.ParseInt(f[0], 10, 64)
		w, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			return 0, 0, fmt.Errorf("bad %s: %q", t, b)
		}
		run += time.Duration(r)
		wait += time.Duration(w)
	}
	return run, wait, nil
}
