package fftest_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
)

// A test of an application's worker: a Kit on a schema of the test's own,
// and a lease that runs out on the manual clock. (It is a test function,
// so it goes in a _test.go file: a Kit needs the test's *testing.T.)
func ExampleNew() {
	testLeaseRunsOut := func(t *testing.T) {
		t.Parallel()
		k := fftest.New(t, nil)
		id := k.Create(executions.CreateParams{Namespace: "billing"})
		lease := k.ClaimOne(fftest.DefaultLane, time.Second)
		k.Clock.Advance(2 * time.Second)
		if err := k.Store.Complete(k.Ctx, lease, nil); !errors.Is(err, ff.ErrLeaseExpired) {
			t.Fatalf("completing after the lease ran out: %v, want ff.ErrLeaseExpired", err)
		}
		k.WantEvents(id, []string{ff.LeaseAcquired}, nil)
	}
	_ = testLeaseRunsOut
}
