package agreement

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestSentinelsField: the record's sentinels field reads back as written,
// in one order whatever the map's, and a malformed line is skipped, not
// read as a shard with no Sentinels.
func TestSentinelsField(t *testing.T) {
	m := map[string][]string{
		"sentinel/b": {"127.0.0.1:26380"},
		"sentinel/a": {"127.0.0.1:26379", "127.0.0.1:26380"},
	}
	s := formatSentinels(m)
	assert.Equal(t, "sentinel/a 127.0.0.1:26379,127.0.0.1:26380\nsentinel/b 127.0.0.1:26380", s)
	assert.Equal(t, m, parseSentinels(s))
	assert.Equal(t, "", formatSentinels(nil))
	assert.Nil(t, parseSentinels(""))
	assert.Equal(t, map[string][]string{"sentinel/c": {"h:1"}},
		parseSentinels("sentinel/a\n sentinel/b\nsentinel/c h:1\nsentinel/d \n"))
}
