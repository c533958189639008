package agreement

import (
	"errors"
	"strconv"
	"testing"

	"github.com/shardcast/shardcast"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFollow: Follow's loop with a build that answers from a script of
// records (the engines' tests run it against real Redis): a mismatch is
// returned as is without follow; with it the recorded layout is adopted
// and built; a record that keeps changing is followed followTries times
// and then reported; an adopt error and a failure of the adopted build
// are returned with what caused them.
func TestFollow(t *testing.T) {
	mismatch := func(fp string) error {
		return &shardcast.LayoutMismatchError{Recorded: shardcast.LayoutRecord{Fingerprint: fp, Description: "layout " + fp}}
	}
	// build succeeds for layout "want", fails with a mismatch against
	// records[i] on its i-th call otherwise.
	builder := func(records []string, last error) (func(string) (string, error), *int) {
		calls := 0
		return func(layout string) (string, error) {
			calls++
			if layout == "want" {
				return "broker on " + layout, last
			}
			if calls > len(records) {
				return "", errors.New("unexpected build")
			}
			return "", mismatch(records[calls-1])
		}, &calls
	}
	adopt := func(_ string, r shardcast.LayoutRecord) (string, error) {
		if r.Fingerprint == "foreign" {
			return "", errors.New("the record is the other engine's")
		}
		return r.Fingerprint, nil
	}

	build, _ := builder([]string{"want"}, nil)
	_, adopted, err := Follow("mine", false, build, adopt)
	require.ErrorIs(t, err, shardcast.ErrLayoutMismatch)
	assert.Nil(t, adopted)

	build, calls := builder([]string{"want"}, nil)
	b, adopted, err := Follow("mine", true, build, adopt)
	require.NoError(t, err)
	assert.Equal(t, "broker on want", b)
	require.NotNil(t, adopted)
	assert.Equal(t, "want", adopted.Fingerprint)
	assert.Equal(t, 2, *calls)

	changing := make([]string, followTries+1)
	for i := range changing {
		changing[i] = "moved-" + strconv.Itoa(i)
	}
	build, calls = builder(changing, nil)
	_, _, err = Follow("mine", true, build, adopt)
	require.ErrorIs(t, err, shardcast.ErrLayoutMismatch)
	assert.ErrorContains(t, err, "changed 3 times")
	assert.Equal(t, followTries+1, *calls, "the first build and one per try")

	build, _ = builder([]string{"foreign"}, nil)
	_, _, err = Follow("mine", true, build, adopt)
	require.ErrorIs(t, err, shardcast.ErrLayoutMismatch)
	assert.ErrorContains(t, err, "cannot adopt the recorded layout foreign (layout foreign): the record is the other engine's")

	down := errors.New("connect: refused")
	build, _ = builder([]string{"want"}, down)
	_, adopted, err = Follow("mine", true, build, adopt)
	require.ErrorIs(t, err, down)
	assert.ErrorContains(t, err, "following the recorded layout want (layout want)")
	assert.Nil(t, adopted)
}
