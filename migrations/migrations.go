// Package migrations prepares a schema for ffriver: it creates the schema if
// missing, applies River's migrations (through rivermigrate) and ffriver's own
// embedded SQL in order, records what it applied in ff_migration, and seeds the
// partition-config row every binary checks at start.
//
// Migrate is safe to run twice and from several processes at once: it holds a
// Postgres advisory lock, scoped to the schema, for the whole run.
package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"sort"
	"strconv"
	"strings"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/internal/riverlog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

//go:embed sql/*.sql
var sqlFS embed.FS

// Version is the ffriver schema version recorded in ff_partition_config.
const Version = "ffriver-1"

// Options tune Migrate. The zero value is valid.
type Options struct {
	// Partitions is the logical partition count seeded into a new schema
	// (default ff.DefaultPartitions). On an existing schema it must be zero
	// or equal to the recorded count.
	Partitions ff.Partitions
	// Logger receives, at DEBUG, one line per applied migration, River's
	// and ffriver's (default: discard), and the warning that River's tables
	// are being created beside another River (default: slog.Default()).
	Logger *slog.Logger
	// RiverSchema receives River's migrations (ffriver.Config.RiverSchema;
	// ffctl migrate --river-schema). Set it to the schema of an
	// application's own River tables to share them, or to the schema of
	// ffriver's tables for a River of ffriver's own.
	//
	// Left empty, Migrate applies River's migrations in ffriver's schema
	// only when River's tables are already there or the connection's
	// search_path shows none (a fresh database: the single-schema layout of
	// ffctl migrate --schema X, as before); when the search_path shows
	// River's tables in another schema, Migrate creates nothing and returns
	// a *RiverSchemaError naming it, since a second River in ffriver's
	// schema would hold ffriver's jobs where the application's River client
	// never looks. When only schemas off the search_path hold River's
	// tables, it creates them in ffriver's schema and warns (Logger),
	// naming those schemas and this setting.
	RiverSchema string
	// UpTo applies ffriver's migrations up to this version only (0: all of
	// them): for an upgrade in steps, and for the tests that upgrade a
	// schema of an earlier release. Verify refuses a schema left behind.
	UpTo int
}

// Result says what a Migrate run did.
type Result struct {
	Schema string
	// RiverSchema received River's migrations.
	RiverSchema  string
	Partitions   ff.Partitions
	RiverApplied []int
	Applied      []string // ffriver migrations applied by this run
}

// Migration is one embedded ffriver migration.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// All returns ffriver's embedded migrations in order.
func All() ([]Migration, error) {
	entries, err := fs.ReadDir(sqlFS, "sql")
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".sql")
		num, rest, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration file %q: want NNNN_name.sql", e.Name())
		}
		b, err := sqlFS.ReadFile("sql/" + e.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: rest, SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// LockKey returns the advisory lock key Migrate holds for schema.
func LockKey(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("ffriver.migrate:" + schema))
	return int64(h.Sum64())
}

// Migrate creates schema if missing and brings ffriver's tables in it up to
// date, and River's in opts.RiverSchema (see Options.RiverSchema for where
// River's go when it is empty). An empty schema means the connection's
// current_schema().
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string, opts *Options) (*Result, error) {
	if opts == nil {
		opts = &Options{}
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if opts.Partitions != 0 {
		if err := opts.Partitions.Check(); err != nil {
			return nil, err
		}
	}
	s, err := dbutil.ParseSchema(schema)
	if err != nil {
		return nil, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, dbutil.MapErr(err, "migrate: connecting")
	}
	defer conn.Release()
	if s, err = s.Resolve(ctx, conn); err != nil {
		return nil, err
	}
	res := &Result{Schema: string(s)}

	key := LockKey(string(s))
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
		return nil, dbutil.MapErr(err, "migrate: taking the migration lock")
	}
	defer func() {
		// Use a fresh context: the caller's may be cancelled, and a lock left
		// held would block every later Migrate on this connection's session.
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", key)
	}()

	riverSchema, err := riverSchemaFor(ctx, conn, s, opts)
	if err != nil {
		return nil, err
	}
	if opts.RiverSchema == "" {
		if err := warnSecondRiver(ctx, conn, riverSchema, opts.Logger); err != nil {
			return nil, err
		}
	}
	res.RiverSchema = string(riverSchema)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+s.Ident()); err != nil {
		return nil, dbutil.MapErr(err, "migrate: creating schema "+string(s))
	}

	if riverSchema != s {
		if _, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+riverSchema.Ident()); err != nil {
			return nil, dbutil.MapErr(err, "migrate: creating schema "+string(riverSchema))
		}
	}
	// River's migrator says each migration (and "No migrations to apply")
	// at INFO: one level quieter, as the binaries' River clients, so that
	// ffctl migrate's own summary is what an operator reads.
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: string(riverSchema), Logger: riverlog.Quieter(logger)})
	if err != nil {
		return nil, fmt.Errorf("migrate: river migrator: %w", err)
	}
	rres, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return nil, dbutil.MapErr(err, "migrate: river migrations")
	}
	for _, v := range rres.Versions {
		res.RiverApplied = append(res.RiverApplied, v.Version)
	}

	all, err := All()
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, s.SQL(`CREATE TABLE IF NOT EXISTS {S}ff_migration (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`)); err != nil {
		return nil, dbutil.MapErr(err, "migrate: creating ff_migration")
	}
	applied, err := appliedVersions(ctx, conn, s)
	if err != nil {
		return nil, err
	}
	for _, m := range all {
		if applied[m.Version] || (opts.UpTo > 0 && m.Version > opts.UpTo) {
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL search_path TO "+s.Ident()); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, s.SQL(`INSERT INTO {S}ff_migration (version, name) VALUES ($1, $2)`), m.Version, m.Name)
			return err
		})
		if err != nil {
			return nil, dbutil.MapErr(err, fmt.Sprintf("migrate: applying %04d_%s", m.Version, m.Name))
		}
		res.Applied = append(res.Applied, fmt.Sprintf("%04d_%s", m.Version, m.Name))
		logger.DebugContext(ctx, "applied ffriver migration", "schema", string(s), "version", m.Version, "name", m.Name)
	}

	want := opts.Partitions
	if want == 0 {
		want = ff.DefaultPartitions
	}
	if _, err := conn.Exec(ctx, s.SQL(`INSERT INTO {S}ff_partition_config (num_partitions, ff_version)
		VALUES ($1, $2) ON CONFLICT (singleton_lock) DO NOTHING`), int(want), Version); err != nil {
		return nil, dbutil.MapErr(err, "migrate: seeding ff_partition_config")
	}
	var got int
	if err := conn.QueryRow(ctx, s.SQL(`SELECT num_partitions FROM {S}ff_partition_config`)).Scan(&got); err != nil {
		return nil, dbutil.MapErr(err, "migrate: reading ff_partition_config")
	}
	if opts.Partitions != 0 && got != int(opts.Partitions) {
		db, _ := s.Where(ctx, conn)
		return nil, &ff.PartitionMismatchError{Schema: string(s), Database: db, Migrated: got, Given: int(opts.Partitions)}
	}
	res.Partitions = ff.Partitions(got)
	return res, nil
}

// Verify checks that schema is fully migrated (River's and ffriver's
// migrations) and returns its partition count. With want non-zero it also
// checks the count. Binaries call it at start and refuse to run on error.
func Verify(ctx context.Context, pool *pgxpool.Pool, schema string, want ff.Partitions) (ff.Partitions, error) {
	n, err := VerifyTables(ctx, pool, schema, want)
	if err != nil {
		return 0, err
	}
	if err := VerifyRiver(ctx, pool, schema); err != nil {
		return 0, err
	}
	return n, nil
}

// VerifyTables checks ffriver's own tables only: that schema has all of
// ffriver's migrations and its partition config (with want non-zero, that
// partition count). It returns the partition count; errors match
// ff.ErrNotMigrated. River's tables may live in another schema
// (VerifyRiver).
func VerifyTables(ctx context.Context, pool *pgxpool.Pool, schema string, want ff.Partitions) (ff.Partitions, error) {
	s, err := dbutil.ParseSchema(schema)
	if err != nil {
		return 0, err
	}
	if s, err = s.Resolve(ctx, pool); err != nil {
		return 0, err
	}
	all, err := All()
	if err != nil {
		return 0, err
	}
	var applied int
	err = pool.QueryRow(ctx, s.SQL(`SELECT count(*) FROM {S}ff_migration WHERE version = ANY($1)`), versionsOf(all)).Scan(&applied)
	if dbutil.IsUndefinedTable(err) {
		return 0, s.NoTables(ctx, pool)
	}
	if err != nil {
		return 0, dbutil.MapErr(err, "verify: reading ff_migration")
	}
	if applied != len(all) {
		db, _ := s.Where(ctx, pool)
		return 0, fmt.Errorf("%w: schema %q of database %q has %d of %d ffriver migrations; run migrations.Migrate (Go) or `ffctl migrate --schema %s`",
			ff.ErrNotMigrated, s, db, applied, len(all), s)
	}
	var n int
	err = pool.QueryRow(ctx, s.SQL(`SELECT num_partitions FROM {S}ff_partition_config`)).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		db, _ := s.Where(ctx, pool)
		return 0, fmt.Errorf("%w: schema %q of database %q has no partition config row; run migrations.Migrate (Go) or `ffctl migrate --schema %s`",
			ff.ErrNotMigrated, s, db, s)
	}
	if err != nil {
		return 0, dbutil.MapErr(err, "verify: reading ff_partition_config")
	}
	if want != 0 && n != int(want) {
		db, _ := s.Where(ctx, pool)
		return 0, &ff.PartitionMismatchError{Schema: string(s), Database: db, Migrated: n, Given: int(want)}
	}
	return ff.Partitions(n), nil
}

// VerifyRiver checks that River's migrations are all applied in
// riverSchema ("" = the pool's search_path), the single-schema layout:
// VerifyRiverFor(ctx, pool, riverSchema, ""). Errors match
// ff.ErrNotMigrated.
func VerifyRiver(ctx context.Context, pool *pgxpool.Pool, riverSchema string) error {
	return VerifyRiverFor(ctx, pool, riverSchema, "")
}

func versionsOf(ms []Migration) []int {
	out := make([]int, len(ms))
	for i, m := range ms {
		out[i] = m.Version
	}
	return out
}

// Step is one migration a Plan would apply.
type Step struct {
	Version int
	Name    string
	// SQL is what would run: River's with its schema filled in, ffriver's
	// as embedded (it runs with search_path set to the schema).
	SQL string
}

// Plan is what Migrate would do to a schema, found without changing
// anything (ffctl migrate --dry-run).
type Plan struct {
	Schema string
	// RiverSchema would receive River's migrations.
	RiverSchema string
	// CreateSchema: the schema does not exist and would be created (so would
	// River's schema when RiverSchema names one that does not exist).
	CreateSchema, CreateRiverSchema bool
	// River and FF are the pending migrations, in order.
	River, FF []Step
	// Partitions is the count recorded in the schema, or the count a
	// migration would record when none is.
	Partitions ff.Partitions
	// NewPartitions: no count is recorded yet; Partitions would be.
	NewPartitions bool
}

// PlanMigrate returns what Migrate with the same arguments would do, reading
// the catalog, River's migration table (through rivermigrate's dry run) and
// ff_migration only: it creates, locks and writes nothing. A partition count
// that differs from the recorded one is ff.ErrNotMigrated, as in Migrate.
func PlanMigrate(ctx context.Context, pool *pgxpool.Pool, schema string, opts *Options) (*Plan, error) {
	if opts == nil {
		opts = &Options{}
	}
	if opts.Partitions != 0 {
		if err := opts.Partitions.Check(); err != nil {
			return nil, err
		}
	}
	s, err := dbutil.ParseSchema(schema)
	if err != nil {
		return nil, err
	}
	if s, err = s.Resolve(ctx, pool); err != nil {
		return nil, err
	}
	exists := func(name dbutil.Schema) (bool, error) {
		var ok bool
		err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, string(name)).Scan(&ok)
		return ok, dbutil.MapErr(err, "migrate: looking for schema "+string(name))
	}
	p := &Plan{Schema: string(s)}
	ok, err := exists(s)
	if err != nil {
		return nil, err
	}
	p.CreateSchema = !ok
	riverSchema, err := riverSchemaFor(ctx, pool, s, opts)
	if err != nil {
		return nil, err
	}
	p.RiverSchema = string(riverSchema)
	if riverSchema != s {
		if ok, err = exists(riverSchema); err != nil {
			return nil, err
		}
		p.CreateRiverSchema = !ok
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: string(riverSchema), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, fmt.Errorf("migrate: river migrator: %w", err)
	}
	rres, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, &rivermigrate.MigrateOpts{DryRun: true})
	if err != nil {
		return nil, dbutil.MapErr(err, "migrate: river migrations (dry run)")
	}
	for _, v := range rres.Versions {
		p.River = append(p.River, Step{Version: v.Version, Name: v.Name, SQL: v.SQL})
	}

	applied := map[int]bool{}
	var recorded *int
	if !p.CreateSchema {
		var hasMig, hasConfig bool
		if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL`,
			s.Ident()+".ff_migration", s.Ident()+".ff_partition_config").Scan(&hasMig, &hasConfig); err != nil {
			return nil, dbutil.MapErr(err, "migrate: looking for ff_migration")
		}
		if hasMig {
			if applied, err = appliedVersions(ctx, pool, s); err != nil {
				return nil, err
			}
		}
		if hasConfig {
			var n int
			err := pool.QueryRow(ctx, s.SQL(`SELECT num_partitions FROM {S}ff_partition_config`)).Scan(&n)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
			case err != nil:
				return nil, dbutil.MapErr(err, "migrate: reading ff_partition_config")
			default:
				recorded = &n
			}
		}
	}
	all, err := All()
	if err != nil {
		return nil, err
	}
	for _, m := range all {
		if !applied[m.Version] {
			p.FF = append(p.FF, Step(m))
		}
	}
	switch {
	case recorded != nil:
		p.Partitions = ff.Partitions(*recorded)
		if opts.Partitions != 0 && *recorded != int(opts.Partitions) {
			db, _ := s.Where(ctx, pool)
			return nil, &ff.PartitionMismatchError{Schema: string(s), Database: db, Migrated: *recorded, Given: int(opts.Partitions)}
		}
	case opts.Partitions != 0:
		p.Partitions, p.NewPartitions = opts.Partitions, true
	default:
		p.Partitions, p.NewPartitions = ff.DefaultPartitions, true
	}
	return p, nil
}

// appliedVersions returns the versions recorded in ff_migration.
func appliedVersions(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, s dbutil.Schema) (map[int]bool, error) {
	rows, err := q.Query(ctx, s.SQL(`SELECT version FROM {S}ff_migration`))
	if err != nil {
		return nil, dbutil.MapErr(err, "migrate: reading ff_migration")
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, dbutil.MapErr(err, "migrate: reading ff_migration")
	}
	applied := map[int]bool{}
	for _, v := range versions {
		applied[v] = true
	}
	return applied, nil
}
