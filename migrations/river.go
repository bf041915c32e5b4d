package migrations

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// RiverSchemaError is Migrate's refusal to choose River's schema for the
// caller: Options.RiverSchema was left empty, schema has no River tables,
// and River's tables already exist in another schema on the connection's
// search_path (an application's own River, typically in public). Creating a
// second River in schema would leave ffriver's jobs where the
// application's River client never looks. It matches ff.ErrValidation.
type RiverSchemaError struct {
	// Schema of ffriver's tables.
	Schema string
	// Found is the schema whose River tables the search_path shows.
	Found string
}

// Error implements error.
func (e *RiverSchemaError) Error() string {
	return fmt.Sprintf("River's tables already exist in schema %q and schema %q has none: set migrations.Options.RiverSchema "+
		"(ffctl migrate --river-schema) to %q to use that River, or to %q to give ffriver a River of its own",
		e.Found, e.Schema, e.Found, e.Schema)
}

// Is makes errors.Is(err, ff.ErrValidation) true: the caller must choose.
func (e *RiverSchemaError) Is(target error) bool { return target == ff.ErrValidation }

type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// FindRiver returns the schema whose River tables an unqualified river_job
// names on q's search_path (what a River client with Config.Schema "" uses),
// and ok=false when the search_path shows none.
func FindRiver(ctx context.Context, q queryRower) (schema string, ok bool, err error) {
	var name *string
	err = q.QueryRow(ctx, `SELECT n.nspname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.oid = to_regclass('river_job')`).Scan(&name)
	if err != nil && err != pgx.ErrNoRows {
		return "", false, dbutil.MapErr(err, "looking for River's tables on the search_path")
	}
	if name == nil {
		return "", false, nil
	}
	return *name, true, nil
}

// hasRiver reports whether schema s holds River's migration table.
func hasRiver(ctx context.Context, q queryRower, s dbutil.Schema) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, s.Ident()+".river_migration").Scan(&ok)
	return ok, dbutil.MapErr(err, "looking for River's tables in schema "+string(s))
}

// riverSchemaFor is the schema Migrate and PlanMigrate give River's
// migrations for ffriver's schema s (resolved): opts.RiverSchema when set;
// else s when River's tables are already there or the search_path shows
// none (the single-schema layout of ffctl migrate); else a
// *RiverSchemaError.
func riverSchemaFor(ctx context.Context, q queryRower, s dbutil.Schema, opts *Options) (dbutil.Schema, error) {
	if opts.RiverSchema != "" {
		return dbutil.ParseSchema(opts.RiverSchema)
	}
	if ok, err := hasRiver(ctx, q, s); err != nil || ok {
		return s, err
	}
	found, ok, err := FindRiver(ctx, q)
	if err != nil {
		return "", err
	}
	if ok && found != string(s) {
		return "", &RiverSchemaError{Schema: string(s), Found: found}
	}
	return s, nil
}

// warnSecondRiver warns (logger, else slog.Default()) when Migrate, left
// without Options.RiverSchema, is about to create River's tables in rs while
// other schemas, off the search_path, hold River's: an application that
// names its River's schema in river.Config.Schema has it off the
// search_path, and the second River then holds flow hops of any process
// that forgets ffriver.Config.RiverSchema where no worker fetches.
func warnSecondRiver(ctx context.Context, q interface {
	queryRower
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, rs dbutil.Schema, logger *slog.Logger) error {
	if ok, err := hasRiver(ctx, q, rs); err != nil || ok {
		return err
	}
	// An application's River (no ffriver tables beside it) first.
	rows, err := q.Query(ctx, `SELECT schemaname::text FROM pg_tables WHERE tablename = 'river_migration' AND schemaname <> $1
		ORDER BY to_regclass(quote_ident(schemaname) || '.ff_partition_config') IS NOT NULL, 1 LIMIT 6`, string(rs))
	if err != nil {
		return dbutil.MapErr(err, "looking for River's tables")
	}
	others, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(others) == 0 {
		return dbutil.MapErr(err, "looking for River's tables")
	}
	said := fmt.Sprintf("%q", others)
	if len(others) > 5 {
		said = fmt.Sprintf("%q and more", others[:5])
	}
	if logger == nil {
		logger = slog.Default()
	}
	logger.WarnContext(ctx, fmt.Sprintf("migrations: creating River's tables in schema %q, a second River: schemas %s already have them "+
		"(off the search_path); if one is your application's River, set migrations.Options.RiverSchema (ffctl migrate --river-schema) "+
		"to it instead, and ffriver.Config.RiverSchema too; set it to %q to say that ffriver gets a River of its own", rs, said, rs),
		"schema", string(rs), "other_rivers", others)
	return nil
}

// VerifyRiverFor checks that River's migrations are all applied in
// riverSchema ("" = schema), the River of ffriver's tables in schema ("" =
// the pool's search_path). Its error (matching ff.ErrNotMigrated) says what
// to do for either layout: when riverSchema has no River tables at all and
// another schema has them, it names that schema and the setting that
// points ffriver at it (ffriver.Config.RiverSchema, --river-schema), since
// migrating riverSchema would create a second, unused River.
func VerifyRiverFor(ctx context.Context, pool *pgxpool.Pool, schema, riverSchema string) error {
	s, err := dbutil.ParseSchema(schema)
	if err != nil {
		return err
	}
	if s, err = s.Resolve(ctx, pool); err != nil {
		return err
	}
	rs := s
	if riverSchema != "" {
		if rs, err = dbutil.ParseSchema(riverSchema); err != nil {
			return err
		}
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: string(rs)})
	if err != nil {
		return fmt.Errorf("verify: river migrator: %w", err)
	}
	if riverMigrated(ctx, pool, rs, migrator.AllVersions()) {
		return nil
	}
	vres, err := migrator.Validate(ctx, nil)
	if err != nil {
		return dbutil.MapErr(err, "verify: River's migrations")
	}
	if vres.OK {
		return nil
	}
	migrate := fmt.Sprintf("ffctl migrate --schema %s --river-schema %s", s, rs)
	present, err := hasRiver(ctx, pool, rs)
	if err != nil {
		return err
	}
	if present {
		return fmt.Errorf("%w: schema %q: River's migrations: %s; run `%s`",
			ff.ErrNotMigrated, rs, strings.Join(vres.Messages, "; "), migrate)
	}
	other, ok, err := otherRiver(ctx, pool, rs)
	if err != nil {
		return err
	}
	if ok {
		return fmt.Errorf("%w: schema %q has no River tables but schema %q has: set ffriver.Config.RiverSchema (--river-schema) to %q "+
			"if that is your River, or run `%s` to give ffriver a River of its own", ff.ErrNotMigrated, rs, other, other, migrate)
	}
	return fmt.Errorf("%w: schema %q has no River tables: set ffriver.Config.RiverSchema (--river-schema) to the schema of your "+
		"River's tables, or run `%s` to give ffriver a River of its own", ff.ErrNotMigrated, rs, migrate)
}

// riverMigrated reports whether every one of versions is applied in rs,
// read from river_migration's main line in one statement: the fast path of
// VerifyRiverFor, which every process and ffctl command opening ffriver
// runs. rivermigrate's Validate first asks information_schema whether the
// table has its line column (River schemas from before it have none), a
// statement that took 15-17 ms on a new connection, a tenth of ffctl
// status's (1,000,000 executions, the 2-core VM). Any error (no such table
// or column) or missing version is left to Validate, which says what is
// missing.
func riverMigrated(ctx context.Context, pool *pgxpool.Pool, rs dbutil.Schema, versions []rivermigrate.Migration) bool {
	var applied []int64
	if err := pool.QueryRow(ctx, rs.SQL(`SELECT coalesce(array_agg(version), '{}') FROM {S}river_migration WHERE line = 'main'`)).Scan(&applied); err != nil {
		return false
	}
	for _, v := range versions {
		if !slices.Contains(applied, int64(v.Version)) {
			return false
		}
	}
	return len(versions) > 0
}

// otherRiver returns the schema other than rs whose River tables are most
// likely the caller's: the one on the search_path, else the only one in
// the database; ok=false when there is no such single schema.
func otherRiver(ctx context.Context, pool *pgxpool.Pool, rs dbutil.Schema) (schema string, ok bool, err error) {
	rows, err := pool.Query(ctx, `SELECT schemaname::text, schemaname = ANY (current_schemas(false)) FROM pg_tables
		WHERE tablename = 'river_migration' AND schemaname <> $1 ORDER BY 2 DESC, 1 LIMIT 2`, string(rs))
	if err != nil {
		return "", false, dbutil.MapErr(err, "looking for River's tables")
	}
	type found struct {
		Name   string
		OnPath bool
	}
	fs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[found])
	if err != nil {
		return "", false, dbutil.MapErr(err, "looking for River's tables")
	}
	if len(fs) > 0 && (fs[0].OnPath || len(fs) == 1) {
		return fs[0].Name, true, nil
	}
	return "", false, nil
}
