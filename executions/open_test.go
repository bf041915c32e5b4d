package executions_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/testdb"
)

// Opening a store without a schema on a connection whose search_path names
// an unmigrated one says that no schema was given and which one the
// search_path chose, not only "run ffctl migrate --schema <that one>".
func TestOpenWithoutSchemaSaysWhichWasUsed(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, &testdb.Options{NoMigrate: true})
	_, err := executions.Open(context.Background(), db.Pool, executions.Config{})
	if !errors.Is(err, ff.ErrNotMigrated) {
		t.Fatalf("Open: %v, want ErrNotMigrated", err)
	}
	for _, want := range []string{"no schema was given", `search_path chose "` + db.Schema + `"`, "--schema"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	// Given explicitly, the schema is not second-guessed.
	_, err = executions.Open(context.Background(), db.Pool, executions.Config{Schema: db.Schema})
	if !errors.Is(err, ff.ErrNotMigrated) || strings.Contains(err.Error(), "no schema was given") {
		t.Errorf("Open with the schema given: %v", err)
	}
}
