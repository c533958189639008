package measure

import (
	"os"
	"testing"
)

// This process has run (it is running this test), and a pid that cannot
// exist is an error, not zeros.
func TestSchedOfThisProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skip("no /proc")
	}
	run, wait, err := Sched(os.Getpid())
	if err != nil || run <= 0 || wait < 0 {
		t.Fatalf("Sched(self) = %v, %v, %v", run, wait, err)
	}
	if _, _, err := Sched(-1); err == nil {
		t.Fatal("Sched(-1): want an error")
	}
}
