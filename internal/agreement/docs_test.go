package agreement

import (
	"os"
	"strings"
	"testing"

	"github.com/shardcast/shardcast"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestScriptsInLayoutDoc: docs/LAYOUT.md §9 gives the scripts other
// implementations run; they must be these, line for line.
func TestScriptsInLayoutDoc(t *testing.T) {
	doc, err := os.ReadFile("../../docs/LAYOUT.md")
	require.NoError(t, err)
	for name, s := range map[string]*shardcast.Script{"join": joinScript, "leave": leaveScript, "read": readScript,
		"instance id": instanceIDScript, "refresh ids": refreshIDsScript} {
		var block strings.Builder
		for line := range strings.Lines(s.Source()) {
			if strings.TrimSpace(line) != "" {
				block.WriteString("    ")
			}
			block.WriteString(line)
		}
		assert.Contains(t, string(doc), "\n"+block.String()+"\n", "the %s script, indented by 4 spaces", name)
	}
}
