// Package testdb gives each test its own freshly migrated schema on a real
// Postgres, and drops only that schema when the test ends.
//
// The server is found through $DATABASE_URL, else
// postgres://postgres@127.0.0.1:5432/test. `make test` finds or starts one and
// exports DATABASE_URL (scripts/devdb.sh). Without a server the test is
// skipped, except with CI=true, where a missing database is a failure.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver/ff"
	ffredact "github.com/ffriver/ffriver/internal/redact"
	"github.com/ffriver/ffriver/migrations"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// DefaultURL is used when $DATABASE_URL is unset.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// URL returns the database URL tests use.
func URL() string {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// DB is one test's schema and a pool whose search_path is that schema.
type DB struct {
	Pool       *pgxpool.Pool
	Schema     string
	Partitions ff.Partitions
}

// Options tune New.
type Options struct {
	// Partitions for the schema (default ff.DefaultPartitions).
	Partitions ff.Partitions
	// NoMigrate creates the schema but applies no migrations.
	NoMigrate bool
	// RiverSchema, when set, receives River's migrations instead of the
	// test's schema (migrations.Options.RiverSchema): the split layout.
	RiverSchema string
	// RiverOnly applies River's migrations only: the schema of a host
	// application's own River, without ffriver's tables.
	RiverOnly bool
	// MaxConns of the pool (default 16).
	MaxConns int32
	// URL of the server to create the schema on (default URL()): a
	// throwaway cluster's, a replication's multi-host URL.
	URL string
}

// New creates a schema named after the test, migrates it, and registers
// cleanup that closes the pool and drops the schema.
func New(tb testing.TB, opts *Options) *DB {
	tb.Helper()
	if opts == nil {
		opts = &Options{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	url := opts.URL
	if url == "" {
		url = URL()
	}
	schema := SchemaName(tb.Name())
	admin := connectTo(tb, url, "", 4)
	if _, err := admin.Exec(ctx, `CREATE SCHEMA "`+schema+`"`); err != nil {
		tb.Fatalf("testdb: creating schema %s: %v", schema, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// A process of the test still stopping (a binary, a River client's
		// last maintenance pass) can deadlock with the drop, which locks
		// every table of the schema; the drop is retried then.
		for attempt := 1; ; attempt++ {
			_, err := admin.Exec(ctx, `DROP SCHEMA IF EXISTS "`+schema+`" CASCADE`)
			var pgErr *pgconn.PgError
			if err != nil && errors.As(err, &pgErr) && pgErr.Code == "40P01" && attempt < 5 {
				continue
			}
			if err != nil {
				tb.Errorf("testdb: dropping schema %s: %v", schema, err)
			}
			break
		}
		admin.Close()
	})

	maxConns := opts.MaxConns
	if maxConns == 0 {
		maxConns = 16
	}
	pool := connectTo(tb, url, schema, maxConns)
	tb.Cleanup(pool.Close)
	db := &DB{Pool: pool, Schema: schema}
	if opts.NoMigrate {
		return db
	}
	if opts.RiverOnly {
		migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema, Logger: slog.New(slog.DiscardHandler)})
		if err == nil {
			_, err = migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
		}
		if err != nil {
			tb.Fatalf("testdb: River's migrations in %s: %v", schema, err)
		}
		return db
	}
	riverSchema := opts.RiverSchema
	if riverSchema == "" {
		// Said, not left to Migrate: the other tests' Rivers are beside it.
		riverSchema = schema
	}
	res, err := migrations.Migrate(ctx, pool, schema, &migrations.Options{Partitions: opts.Partitions, RiverSchema: riverSchema})
	if err != nil {
		tb.Fatalf("testdb: migrating %s: %v", schema, err)
	}
	db.Partitions = res.Partitions
	return db
}

// Connect returns a pool on the test database with search_path set to schema
// (when non-empty). It fails or skips the test when the server is unreachable.
func Connect(tb testing.TB, schema string) *pgxpool.Pool {
	tb.Helper()
	return connectWith(tb, schema, 4)
}

func connectWith(tb testing.TB, schema string, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	return connectTo(tb, URL(), schema, maxConns)
}

func connectTo(tb testing.TB, url, schema string, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		tb.Fatalf("testdb: the database URL: %v", err)
	}
	cfg.MaxConns = maxConns
	if schema != "" {
		cfg.ConnConfig.RuntimeParams["search_path"] = schema
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		unreachable(tb, url, err)
	}
	return pool
}

// unreachable skips the test, or fails it with CI=true, saying the server
// at url could not be reached.
func unreachable(tb testing.TB, url string, err error) {
	tb.Helper()
	msg := "testdb: no Postgres at " + redact(url) + ": " + ffredact.Scrub(err.Error(), ffredact.Secrets(url)) +
		" (run `make test`, which finds or starts one, or set DATABASE_URL)"
	if os.Getenv("CI") == "true" {
		tb.Fatal(msg)
	}
	tb.Skip(msg)
}

// SchemaName returns a unique, valid schema name derived from a test name.
func SchemaName(testName string) string {
	var b strings.Builder
	b.WriteString("t_")
	for _, r := range strings.ToLower(testName) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= 30 {
			break
		}
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	b.WriteString("_")
	b.WriteString(hex.EncodeToString(rnd[:]))
	return b.String()
}

func redact(u string) string { return ffredact.ConnString(u) }

// Beside is an application's River and an empty schema for ffriver's
// tables beside it: River's schema with River's migrations only
// (Options.RiverOnly), ffriver's schema unmigrated, and the application's
// pool, whose search_path is ffriver's schema, then River's. All three
// are closed or dropped when the test ends.
type Beside struct {
	River, FF *DB
	Pool      *pgxpool.Pool
}

// NewBeside creates a Beside.
func NewBeside(tb testing.TB) *Beside {
	tb.Helper()
	b := &Beside{River: New(tb, &Options{RiverOnly: true}), FF: New(tb, &Options{NoMigrate: true})}
	// Sized for an application's River client with ffriver's queues
	// (ffriver.Configure refuses a pool below ffriver.PoolConns).
	b.Pool = connectWith(tb, b.FF.Schema+", "+b.River.Schema, 16)
	tb.Cleanup(b.Pool.Close)
	return b
}
