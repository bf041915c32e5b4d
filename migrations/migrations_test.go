package migrations_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/internal/testlog"
	"github.com/ffriver/ffriver/migrations"
)

func TestMigrateTwiceAndConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, &testdb.Options{NoMigrate: true, MaxConns: 8})

	// A schema that does not exist yet is created by Migrate.
	if _, err := db.Pool.Exec(ctx, `DROP SCHEMA "`+db.Schema+`"`); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	results := make([]*migrations.Result, 4)
	errs := make([]error, 4)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = migrations.Migrate(ctx, db.Pool, db.Schema, &migrations.Options{Partitions: 64})
		}()
	}
	wg.Wait()
	applied := 0
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent Migrate %d: %v", i, err)
		}
		applied += len(results[i].Applied)
		if results[i].Partitions != 64 {
			t.Errorf("Migrate %d: partitions = %d, want 64", i, results[i].Partitions)
		}
	}
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	if applied != len(all) {
		t.Errorf("ffriver migrations applied across 4 concurrent runs = %d, want exactly %d", applied, len(all))
	}

	again, err := migrations.Migrate(ctx, db.Pool, db.Schema, nil)
	if err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	if len(again.Applied) != 0 || len(again.RiverApplied) != 0 {
		t.Errorf("second Migrate applied %v / river %v, want nothing", again.Applied, again.RiverApplied)
	}
	n, err := migrations.Verify(ctx, db.Pool, db.Schema, 64)
	if err != nil || n != 64 {
		t.Fatalf("Verify = %d, %v; want 64, nil", n, err)
	}
	if _, err := migrations.Verify(ctx, db.Pool, db.Schema, 256); !errors.Is(err, ff.ErrNotMigrated) {
		t.Errorf("Verify with a different partition count: err = %v, want ErrNotMigrated", err)
	}
	if _, err := migrations.Migrate(ctx, db.Pool, db.Schema, &migrations.Options{Partitions: 128}); !errors.Is(err, ff.ErrNotMigrated) {
		t.Errorf("re-Migrate with a different partition count: err = %v, want ErrNotMigrated", err)
	}
}

func TestVerifyRefusesUnmigratedSchema(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, &testdb.Options{NoMigrate: true})
	_, err := migrations.Verify(context.Background(), db.Pool, db.Schema, 0)
	if !errors.Is(err, ff.ErrNotMigrated) {
		t.Fatalf("Verify on an empty schema: err = %v, want ErrNotMigrated", err)
	}
}

func TestMigrateRejectsSchemaWithSQL(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, &testdb.Options{NoMigrate: true})
	for _, bad := range []string{`x"; DROP TABLE y; --`, "a b", "1abc", "ünï", "waytoolongschemanamewaytoolongschemanamewaytoolong"} {
		_, err := migrations.Migrate(context.Background(), db.Pool, bad, nil)
		var verr *ff.ValidationError
		if !errors.As(err, &verr) || verr.Field != "schema" {
			t.Errorf("Migrate(%q): err = %v, want a schema ValidationError", bad, err)
		}
	}
}

func TestMigrateRejectsBadPartitionCount(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, &testdb.Options{NoMigrate: true})
	for _, n := range []ff.Partitions{-1, 40000} {
		if _, err := migrations.Migrate(context.Background(), db.Pool, db.Schema, &migrations.Options{Partitions: n}); !errors.Is(err, ff.ErrValidation) {
			t.Errorf("Migrate with %d partitions: err = %v, want ErrValidation", n, err)
		}
	}
}

// Migrating is quiet at the default level (ffctl migrate's summary is what
// an operator reads): River's migrator said every migration, and "No
// migrations to apply" on a second run, at INFO. At DEBUG both show.
func TestMigrateIsQuietAtInfo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, &testdb.Options{NoMigrate: true})
	var info, debug testlog.Buffer
	for range 2 {
		if _, err := migrations.Migrate(ctx, db.Pool, db.Schema, &migrations.Options{
			Logger: slog.New(slog.NewTextHandler(&info, &slog.HandlerOptions{Level: slog.LevelInfo}))}); err != nil {
			t.Fatal(err)
		}
	}
	if info.String() != "" {
		t.Errorf("Migrate logged at INFO:\n%s", info.String())
	}
	db2 := testdb.New(t, &testdb.Options{NoMigrate: true})
	if _, err := migrations.Migrate(ctx, db2.Pool, db2.Schema, &migrations.Options{
		Logger: slog.New(slog.NewTextHandler(&debug, &slog.HandlerOptions{Level: slog.LevelDebug}))}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(debug.String(), "applied ffriver migration") {
		t.Errorf("Migrate at DEBUG did not say what it applied:\n%s", debug.String())
	}
}
