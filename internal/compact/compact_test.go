package compact

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestInts(t *testing.T) {
	all := make([]int, 128)
	for i := range all {
		all[i] = 127 - i
	}
	every3 := []int{}
	for i := 0; i < 128; i += 3 {
		every3 = append(every3, i)
	}
	for _, c := range []struct {
		in   []int
		want string
	}{
		{nil, ""},
		{[]int{5}, "5"},
		{[]int{64, 3, 2, 1, 0, 2}, "0-3,64"},
		{all, "0-127"},
		{[]int{1, 3, 5, 7}, "1,3,5,7"},
		{every3, "0,3,6,9,12,15,18,21,… (43 in all)"},
		{[]int{0, 1, 3, 4, 6, 7, 9, 10, 12, 13}, "0-1,3-4,6-7,9-10,12-13"},
	} {
		in := append([]int(nil), c.in...)
		assert.Equal(t, c.want, Ints(c.in), "%v", c.in)
		assert.Equal(t, in, c.in, "the argument is left as it was")
	}
}
