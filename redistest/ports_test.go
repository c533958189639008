package redistest

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReservePortLocksClientAndBusPort(t *testing.T) {
	res, err := reservePort()
	require.NoError(t, err)
	defer res.release()
	assert.GreaterOrEqual(t, res.port, portMin)
	assert.Less(t, res.port, portMax)
	assert.Less(t, res.port+busPortOffset, 32768, "the bus port must stay below the ephemeral range")

	for _, p := range []int{res.port, res.port + busPortOffset} {
		_, locked, err := lockPort(p)
		require.NoError(t, err)
		assert.False(t, locked, "port %d must be held by the reservation", p)
	}
	res.release()
	for _, p := range []int{res.port, res.port + busPortOffset} {
		unlock, locked, err := lockPort(p)
		require.NoError(t, err)
		assert.True(t, locked, "port %d must be free after release", p)
		unlock()
	}
	res.release() // idempotent
}

func TestReservePortSkipsTakenPorts(t *testing.T) {
	// A port bound by another process, a bus port bound by another
	// process, and a port locked by another reservation must all be
	// skipped; the first fully free candidate wins.
	var taken []int
	for len(taken) < 3 {
		res, err := reservePort()
		require.NoError(t, err)
		defer res.release()
		taken = append(taken, res.port)
	}
	res, err := reservePort()
	require.NoError(t, err)
	free := res.port
	res.release()

	l1, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(taken[0]))
	require.NoError(t, err)
	defer l1.Close()
	l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(taken[1]+busPortOffset))
	require.NoError(t, err)
	defer l2.Close()
	// taken[0] and taken[1] are only bound, not locked, by the test:
	// release their locks so that only the bind probe can reject them.
	for _, p := range taken[:2] {
		for _, q := range []int{p, p + busPortOffset} {
			unlockPortForTest(t, q)
		}
	}
	candidates := []int{taken[0], taken[1], taken[2], free}
	got, err := reservePortFrom(func() int {
		p := candidates[0]
		if len(candidates) > 1 {
			candidates = candidates[1:]
		}
		return p
	})
	require.NoError(t, err)
	defer got.release()
	assert.Equal(t, free, got.port)
}

// unlockPortForTest removes another reservation's lock file so that the
// port looks unlocked; the reservation's later release is harmless.
func unlockPortForTest(t *testing.T, port int) {
	t.Helper()
	require.NoError(t, os.Remove(filepath.Join(os.TempDir(), "shardcast-redistest-ports", strconv.Itoa(port)+".lock")))
}

func TestReservePortGivesUp(t *testing.T) {
	res, err := reservePort()
	require.NoError(t, err)
	defer res.release()
	_, err = reservePortFrom(func() int { return res.port })
	assert.ErrorIs(t, err, errNoFreePort)
}
