package leasecheck

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Resource bounds of the clients' calls (issue 36): every call returns by
// its context's deadline plus returnSlack, and once every client has
// stopped, no backend of an application process is still busy on a
// client's behalf (running a statement, waiting on a lock, or idle in a
// transaction) after idleWithin. The bounds probe checks the same for its
// own calls with a holder in place (probe.go); these cover every call of
// the workload, faults included.
const (
	// returnSlack is how late after its deadline a call may return: the
	// time to notice the deadline and close a connection on two busy cores.
	returnSlack = 2 * time.Second
	// idleWithin is how long after the clients stopped the processes'
	// backends have to become idle.
	idleWithin = 5 * time.Second
)

// callBounds collects the violations of the bounds.
type callBounds struct {
	mu    sync.Mutex
	found []Violation
	// calls counts the calls checked; latest is the latest return after
	// a deadline.
	calls  int
	latest time.Duration
}

// returned checks a call that returned at now against its context's
// deadline.
func (b *callBounds) returned(exec, what string, ctx context.Context) {
	dl, ok := ctx.Deadline()
	if !ok {
		return
	}
	late := time.Since(dl)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls++
	b.latest = max(b.latest, late)
	if late > returnSlack {
		b.found = append(b.found, Violation{Check: "bounds", Exec: exec,
			What: fmt.Sprintf("%s returned %s after its deadline (allowed: %s)", what, late.Round(time.Millisecond), returnSlack)})
	}
}

// idle waits up to idleWithin for the backends of appNames to hold no
// statement, lock wait or open transaction, and records a violation
// naming those that still do.
func (b *callBounds) idle(ctx context.Context, admin *pgxpool.Pool, appNames []string) {
	var busy []string
	ok := await(ctx, idleWithin, func() bool {
		rows, err := admin.Query(ctx, `SELECT application_name || ' pid ' || pid || ': ' || state ||
			COALESCE(', waiting on ' || wait_event_type || '/' || wait_event, '') || ': ' || left(query, 120)
			FROM pg_stat_activity
			WHERE application_name = ANY($1) AND pid <> pg_backend_pid()
			  AND (state IN ('active', 'idle in transaction', 'idle in transaction (aborted)') OR wait_event_type = 'Lock')`, appNames)
		if err != nil {
			return false
		}
		busy = busy[:0]
		for rows.Next() {
			var s string
			if rows.Scan(&s) == nil {
				busy = append(busy, s)
			}
		}
		rows.Close()
		return rows.Err() == nil && len(busy) == 0
	})
	if !ok {
		slices.Sort(busy)
		b.mu.Lock()
		defer b.mu.Unlock()
		b.found = append(b.found, Violation{Check: "bounds",
			What: fmt.Sprintf("%d backends of the application processes still busy %s after every client stopped", len(busy), idleWithin),
			Ops:  busy})
	}
}

// violations returns what the bounds found.
func (b *callBounds) violations() []Violation {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.found)
}

// String summarizes the bounds for the report.
func (b *callBounds) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return fmt.Sprintf("%d calls returned at most %s after their deadline (allowed %s)", b.calls, max(b.latest, 0).Round(time.Millisecond), returnSlack)
}
