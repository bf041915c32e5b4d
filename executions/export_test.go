package executions

import (
	"context"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/actions"
	"github.com/jackc/pgx/v5"
)

// CancelSibling is the dispatcher's cancel of one sibling (cancelSibling),
// for the external tests that race it against a worker.
func CancelSibling(ctx context.Context, s *Store, tx pgx.Tx, id ff.ExecutionID, reason string) (actions.Outcome, error) {
	return s.cancelSibling(ctx, tx, id, reason)
}

// FinishRetries counts the Complete, Fail and Release calls a batch handed
// back because another transaction held their execution.
func FinishRetries(s *Store) int64 { return s.finisher.retries.Load() }
