package migrations_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/internal/testlog"
	"github.com/ffriver/ffriver/migrations"
	"github.com/jackc/pgx/v5/pgxpool"
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
	// A different count is a *ff.PartitionMismatchError naming both counts
	// and the database, which still matches ErrNotMigrated (issue 40).
	_, err = migrations.Verify(ctx, db.Pool, db.Schema, 256)
	var pm *ff.PartitionMismatchError
	if !errors.Is(err, ff.ErrNotMigrated) || !errors.As(err, &pm) || pm.Migrated != 64 || pm.Given != 256 || pm.Schema != db.Schema ||
		pm.Database == "" || pm.Database == "?" || strings.Contains(err.Error(), "not migrated") ||
		!strings.Contains(err.Error(), "partition count mismatch: schema \""+db.Schema+"\" in database \""+pm.Database+"\" was migrated with 64 partitions, this process was given 256") {
		t.Errorf("Verify with a different partition count: err = %v, want a *ff.PartitionMismatchError (64, given 256) matching ErrNotMigrated", err)
	}
	if _, err := migrations.Migrate(ctx, db.Pool, db.Schema, &migrations.Options{Partitions: 128}); !errors.Is(err, ff.ErrNotMigrated) {
		t.Errorf("re-Migrate with a different partition count: err = %v, want ErrNotMigrated", err)
	}
}

// An empty schema and a missing one are both not migrated, and the error
// says which, and in which database ffriver looked.
func TestVerifyRefusesUnmigratedSchema(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, &testdb.Options{NoMigrate: true})
	var name string
	if err := db.Pool.QueryRow(context.Background(), `SELECT current_database()`).Scan(&name); err != nil {
		t.Fatal(err)
	}
	_, err := migrations.Verify(context.Background(), db.Pool, db.Schema, 0)
	if !errors.Is(err, ff.ErrNotMigrated) || !strings.Contains(err.Error(), "has no ffriver tables") || !strings.Contains(err.Error(), `"`+name+`"`) {
		t.Fatalf("Verify on an empty schema: err = %v, want ErrNotMigrated saying it has no tables, naming database %q", err, name)
	}
	missing := "ff_missing_" + strings.TrimPrefix(db.Schema[len(db.Schema)-8:], "_")
	_, err = migrations.Verify(context.Background(), db.Pool, missing, 0)
	if !errors.Is(err, ff.ErrNotMigrated) || !strings.Contains(err.Error(), "does not exist") || !strings.Contains(err.Error(), `"`+name+`"`) {
		t.Fatalf("Verify on a missing schema: err = %v, want ErrNotMigrated saying it does not exist, naming database %q", err, name)
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
		// RiverSchema said: the other tests' Rivers are beside it, which
		// Migrate would warn of otherwise.
		if _, err := migrations.Migrate(ctx, db.Pool, db.Schema, &migrations.Options{RiverSchema: db.Schema,
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

// An application's River is on the search_path and ffriver's schema has
// none: Migrate without Options.RiverSchema used to create a second,
// unused River in ffriver's schema (issue 24, item 1). It refuses, naming
// both schemas and the setting, and creates nothing; with RiverSchema set,
// River's tables stay where they are.
func TestMigrateRefusesASecondRiverUnlessAsked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	app := testdb.NewBeside(t)
	host, ffdb, pool := app.River, app.FF, app.Pool

	_, err := migrations.Migrate(ctx, pool, ffdb.Schema, nil)
	var rse *migrations.RiverSchemaError
	if !errors.As(err, &rse) || rse.Found != host.Schema || rse.Schema != ffdb.Schema || !errors.Is(err, ff.ErrValidation) {
		t.Fatalf("Migrate without RiverSchema beside a host's River: err = %v, want a *RiverSchemaError naming %s", err, host.Schema)
	}
	for _, want := range []string{"RiverSchema", "--river-schema", host.Schema, ffdb.Schema} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q: %v", want, err)
		}
	}
	if _, err := migrations.PlanMigrate(ctx, pool, ffdb.Schema, nil); !errors.As(err, &rse) {
		t.Errorf("PlanMigrate without RiverSchema beside a host's River: err = %v, want the same refusal", err)
	}
	if n := riverTables(t, pool, ffdb.Schema); n != 0 {
		t.Fatalf("%d River tables created in ffriver's schema by a refused Migrate", n)
	}

	res, err := migrations.Migrate(ctx, pool, ffdb.Schema, &migrations.Options{RiverSchema: host.Schema})
	if err != nil {
		t.Fatal(err)
	}
	if res.RiverSchema != host.Schema || len(res.RiverApplied) != 0 || len(res.Applied) == 0 {
		t.Errorf("Migrate with RiverSchema = %s: %+v", host.Schema, res)
	}
	if n := riverTables(t, pool, ffdb.Schema); n != 0 {
		t.Errorf("%d River tables in ffriver's schema", n)
	}
	// Once ffriver's schema is migrated, a run that forgets RiverSchema is
	// still refused: it would create the second River now.
	if _, err := migrations.Migrate(ctx, pool, ffdb.Schema, nil); !errors.As(err, &rse) {
		t.Errorf("re-Migrate without RiverSchema: err = %v, want a *RiverSchemaError", err)
	}
	// Asking for a River of ffriver's own is allowed.
	if res, err := migrations.Migrate(ctx, pool, ffdb.Schema, &migrations.Options{RiverSchema: ffdb.Schema}); err != nil || len(res.RiverApplied) == 0 {
		t.Errorf("Migrate with RiverSchema = ffriver's schema: %+v, %v", res, err)
	}
}

// The split layout's "not migrated" hint (issue 24, item 2): River's tables
// in one schema, ffriver's in another, and the River schema left out. The
// hint used to be `run ffctl migrate --schema <ffriver's>`, which created a
// second River; it names the River schema, RiverSchema and --river-schema.
func TestVerifyRiverForNamesRiverSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	app := testdb.NewBeside(t)
	riv, ffdb, pool := app.River, app.FF, app.Pool
	if _, err := migrations.Migrate(ctx, pool, ffdb.Schema, &migrations.Options{RiverSchema: riv.Schema}); err != nil {
		t.Fatal(err)
	}
	if err := migrations.VerifyRiverFor(ctx, pool, ffdb.Schema, riv.Schema); err != nil {
		t.Fatalf("the split layout: %v", err)
	}
	err := migrations.VerifyRiverFor(ctx, pool, ffdb.Schema, "")
	if !errors.Is(err, ff.ErrNotMigrated) {
		t.Fatalf("River schema left out: err = %v, want ErrNotMigrated", err)
	}
	for _, want := range []string{"Config.RiverSchema", "--river-schema", `"` + riv.Schema + `"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the hint does not say %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "run `ffctl migrate --schema "+ffdb.Schema+"`") {
		t.Errorf("the hint still says to migrate ffriver's schema alone: %v", err)
	}
}

// riverTables counts River's tables in schema.
func riverTables(t *testing.T, pool *pgxpool.Pool, schema string) int {
	t.Helper()
	return (&fftest.DB{TB: t, Pool: pool}).Count(`SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename LIKE 'river%'`, schema)
}
