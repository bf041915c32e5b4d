package testdb

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Reservations share one budget, all or nothing: with 3 of 4 units held, 2
// more are refused (and none of them kept) while 1 is granted; once the
// holder's session ends, its units are free. The test's own key keeps it
// apart from the reservations of the tests running beside it.
func TestReserveTakesAllOrNothing(t *testing.T) {
	Connect(t, "").Close() // skip (fail with CI=true) without a database
	ctx := t.Context()
	key := int32(rand.N(1<<30)) + 1<<30 // not reserveKey, not another run's
	conn := func() *pgx.Conn {
		t.Helper()
		c, err := pgx.Connect(ctx, URL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	take := func(c *pgx.Conn, n int) bool {
		t.Helper()
		got, err := take(ctx, c, key, n, 4)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	holder, other, third := conn(), conn(), conn()
	if !take(holder, 3) {
		t.Fatal("3 of a free budget of 4 refused")
	}
	if take(other, 2) {
		t.Fatal("2 of a budget of 4 granted while 3 are held")
	}
	if !take(third, 1) {
		t.Fatal("the last unit refused: a refused request kept some of what it asked for")
	}
	if err := holder.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The server ends the holder's backend, and releases its locks, after
	// Close has returned.
	for deadline := time.Now().Add(30 * time.Second); !take(other, 2); {
		if time.Now().After(deadline) {
			t.Fatal("2 still refused 30 s after the holder's session ended")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
