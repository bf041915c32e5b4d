package integration

import (
	"testing"

	"github.com/ffriver/ffriver/internal/pgcluster"
)

// skipOrFail skips the test, or fails it with CI=true, where everything the
// suite needs must be installed.
func skipOrFail(t *testing.T, msg string) {
	t.Helper()
	pgcluster.SkipOrFail(t, msg)
}
