package testdb

import (
	"testing"
	"time"
)

// Reservations share one budget: with 3 of 4 held, a test asking for 2
// waits until the holder ends, then gets them.
func TestReserveSharesOneBudget(t *testing.T) {
	Connect(t, "").Close() // skip (fail with CI=true) without a database
	t.Setenv("FF_TEST_CONN_BUDGET", "4")
	held, release, second := make(chan struct{}), make(chan struct{}), make(chan struct{})
	t.Run("group", func(t *testing.T) {
		t.Run("holder", func(t *testing.T) {
			t.Parallel()
			Reserve(t, 3)
			close(held)
			<-release
		})
		t.Run("second", func(t *testing.T) {
			t.Parallel()
			<-held
			Reserve(t, 2)
			close(second)
		})
		t.Run("judge", func(t *testing.T) {
			t.Parallel()
			<-held
			select {
			case <-second:
				t.Error("a test got 2 of a budget of 4 while another held 3")
			case <-time.After(time.Second):
			}
			close(release)
			<-second
		})
	})
}
