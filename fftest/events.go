package fftest

import (
	"slices"
	"strconv"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/jackc/pgx/v5"
)

// LeaseEvent is a row of the lease outbox (ff_lease_event) as a test
// compares it. A column the row leaves NULL reads as "" (strings) or -1
// (numbers).
type LeaseEvent struct {
	// Type is one of ff's Lease* constants: acquired, renewed, expired, …
	Type        string
	Namespace   string
	InstanceTag string
	// Epoch is the lease epoch the event is about.
	Epoch int64
	// Attempt is the attempt index.
	Attempt int32
	// AtMs is when the event happened on the store's clock.
	AtMs int64
}

// String returns "type/namespace/tag/epoch" ("" for a missing epoch), the
// form WantEventStrings compares.
func (e LeaseEvent) String() string {
	epoch := ""
	if e.Epoch >= 0 {
		epoch = strconv.FormatInt(e.Epoch, 10)
	}
	return e.Type + "/" + e.Namespace + "/" + e.InstanceTag + "/" + epoch
}

// CompletionEvent is a row of the completion outbox (ff_completion_event)
// as a test compares it. A column the row leaves NULL reads as "".
type CompletionEvent struct {
	// Outcome is one of ff's Outcome* constants: success, failed, …
	Outcome     string
	Namespace   string
	InstanceTag string
	// AtMs is when the event happened on the store's clock.
	AtMs int64
}

// String returns "outcome/namespace/tag", the form WantEventStrings
// compares.
func (e CompletionEvent) String() string {
	return e.Outcome + "/" + e.Namespace + "/" + e.InstanceTag
}

// LeaseEvents returns the lease events of id, oldest first.
func (k *Kit) LeaseEvents(id ff.ExecutionID) []LeaseEvent {
	k.TB.Helper()
	return collect(k, `SELECT event_type, COALESCE(namespace, ''), COALESCE(instance_tag, ''),
		COALESCE(lease_epoch, -1), COALESCE(attempt_index, -1), occurred_at_ms
		FROM {S}ff_lease_event WHERE execution_id = $1 AND partition_key = $2 ORDER BY event_id`,
		[]any{id.UUID.String(), int32(id.Partition)}, func(r pgx.CollectableRow) (LeaseEvent, error) {
			var e LeaseEvent
			err := r.Scan(&e.Type, &e.Namespace, &e.InstanceTag, &e.Epoch, &e.Attempt, &e.AtMs)
			return e, err
		})
}

// CompletionEvents returns the completion events of id, oldest first.
func (k *Kit) CompletionEvents(id ff.ExecutionID) []CompletionEvent {
	k.TB.Helper()
	return collect(k, `SELECT outcome, COALESCE(namespace, ''), COALESCE(instance_tag, ''), occurred_at_ms
		FROM {S}ff_completion_event WHERE execution_id = $1 AND partition_key = $2 ORDER BY event_id`,
		[]any{id.UUID, id.Partition}, func(r pgx.CollectableRow) (CompletionEvent, error) {
			var e CompletionEvent
			err := r.Scan(&e.Outcome, &e.Namespace, &e.InstanceTag, &e.AtMs)
			return e, err
		})
}

// collect runs q (its {S} the store's schema) and scans every row.
func collect[T any](k *Kit, q string, args []any, scan pgx.RowToFunc[T]) []T {
	k.TB.Helper()
	ctx, cancel := k.queryCtx()
	defer cancel()
	rows, err := k.Pool.Query(ctx, dbutil.Schema(k.Store.Schema()).SQL(q), args...)
	if err != nil {
		k.TB.Fatalf("reading events: %v", err)
	}
	out, err := pgx.CollectRows(rows, scan)
	if err != nil {
		k.TB.Fatalf("reading events: %v", err)
	}
	return out
}

// WantEvents fails the test (Errorf: it goes on) unless the lease events
// of id have the types lease and its completion events the outcomes
// completion, in order.
func (k *Kit) WantEvents(id ff.ExecutionID, lease, completion []string) {
	k.TB.Helper()
	k.wantEvents(id, lease, completion, func(e LeaseEvent) string { return e.Type }, func(e CompletionEvent) string { return e.Outcome })
}

// WantEventStrings is WantEvents comparing the events' String forms:
// "type/namespace/tag/epoch" for lease events, "outcome/namespace/tag" for
// completion events.
func (k *Kit) WantEventStrings(id ff.ExecutionID, lease, completion []string) {
	k.TB.Helper()
	k.wantEvents(id, lease, completion, LeaseEvent.String, CompletionEvent.String)
}

func (k *Kit) wantEvents(id ff.ExecutionID, lease, completion []string, l func(LeaseEvent) string, c func(CompletionEvent) string) {
	k.TB.Helper()
	if got := mapped(k.LeaseEvents(id), l); !slices.Equal(got, lease) {
		k.TB.Errorf("lease events of %s = %q, want %q", id, got, lease)
	}
	if got := mapped(k.CompletionEvents(id), c); !slices.Equal(got, completion) {
		k.TB.Errorf("completion events of %s = %q, want %q", id, got, completion)
	}
}

func mapped[T any](in []T, f func(T) string) []string {
	var out []string
	for _, e := range in {
		out = append(out, f(e))
	}
	return out
}
