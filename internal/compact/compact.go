// Package compact writes lists of small numbers (partitions) for people:
// ranges and, past a few, a count. It imports nothing of the project, so
// that the root package (Event.String) and the kit's emitter share it.
package compact

import (
	"slices"
	"strconv"
	"strings"
)

// maxRuns is how many runs of consecutive numbers Ints writes before
// it gives the count instead of the rest.
const maxRuns = 8

// Ints writes a list of partitions (or any small non-negative numbers)
// for a log line: sorted, without repeats, consecutive ones as a range:
// "0-41,64". Past maxRuns runs it writes the first ones and the count of
// the whole list: "0,3,5-7,9,12,14,17,20,… (43 in all)". A log line of a
// master's 43 of 128 partitions stays one short field, not 43 numbers.
// It does not change ps.
func Ints(ps []int) string {
	if len(ps) == 0 {
		return ""
	}
	s := slices.Clone(ps)
	slices.Sort(s)
	s = slices.Compact(s)
	var b strings.Builder
	runs := 0
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if runs == maxRuns {
			b.WriteString(",… (")
			b.WriteString(strconv.Itoa(len(s)))
			b.WriteString(" in all)")
			return b.String()
		}
		if runs > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(s[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(s[j]))
		}
		runs++
		i = j + 1
	}
	return b.String()
}
