package fftest_test

import (
	"context"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
)

func TestStoreOnItsOwnSchema(t *testing.T) {
	t.Parallel()
	clock := ff.NewManualClock(1_800_000_000_000)
	st, s := fftest.NewStore(t, executions.Config{Clock: clock})
	if st.Schema() != s.Name {
		t.Fatalf("store on %s, schema %s", st.Schema(), s.Name)
	}
	id, err := st.Create(context.Background(), executions.CreateParams{Lane: "a"})
	if err != nil {
		t.Fatal(err)
	}
	fftest.Await(t, 5*time.Second, "the execution", func() bool {
		e, err := st.Get(context.Background(), id)
		return err == nil && e.ID == id
	})
}
