package pipeline

import (
	"context"
	"fmt"

	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// inTx runs fn in a transaction on env's pool (ticks and scans; items run
// through their engine); fn commits nothing itself.
func inTx(ctx context.Context, env *Env, fn func(pgx.Tx) error) error {
	tx, err := env.Pool().Begin(ctx)
	if err != nil {
		return dbutil.MapErr(err, "begin")
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return dbutil.MapErr(err, "commit")
	}
	return nil
}

// complete records output and completes job inside tx.
func complete[T river.JobArgs](ctx context.Context, tx pgx.Tx, job *river.Job[T], output any) error {
	if err := river.RecordOutput(ctx, output); err != nil {
		return fmt.Errorf("recording job output: %w", err)
	}
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return dbutil.MapErr(err, "completing job")
	}
	return nil
}
