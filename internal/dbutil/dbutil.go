// Package dbutil holds the small pieces every ffriver package that talks to
// Postgres shares: schema-qualified SQL, identifier checks and the mapping of
// driver errors onto ff's typed errors.
package dbutil

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"

	"github.com/ffriver/ffriver/ff"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// MaxSchemaLen is the longest schema name accepted. River requires that
// "<schema>.river_leadership" fits Postgres's 63-byte channel names.
const MaxSchemaLen = 46

var schemaRe = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// Schema is a validated schema name; the empty Schema means the connection's
// search_path.
type Schema string

// ParseSchema validates name. Names with anything but letters, digits and
// underscores are rejected, so a schema can never carry SQL.
func ParseSchema(name string) (Schema, error) {
	if name == "" {
		return "", nil
	}
	if len(name) > MaxSchemaLen {
		return "", ff.Validationf("schema", "%s is longer than %d characters", ff.Excerpt(name), MaxSchemaLen)
	}
	if !schemaRe.MatchString(name) {
		return "", ff.Validationf("schema", "%s: only letters, digits and underscores, not starting with a digit", ff.Excerpt(name))
	}
	return Schema(name), nil
}

// Ident returns the quoted identifier, or "" for the empty schema.
func (s Schema) Ident() string {
	if s == "" {
		return ""
	}
	return `"` + string(s) + `"`
}

// SQL replaces every {S} in q with the quoted schema and a dot (or nothing for
// the empty schema). ffriver's SQL writes {S}ff_exec_core and so on.
func (s Schema) SQL(q string) string {
	if s == "" {
		return strings.ReplaceAll(q, "{S}", "")
	}
	return strings.ReplaceAll(q, "{S}", s.Ident()+".")
}

// Resolve returns s, or the connection's current_schema() when s is empty.
func (s Schema) Resolve(ctx context.Context, q QueryRower) (Schema, error) {
	if s != "" {
		return s, nil
	}
	var name *string
	var path, db string
	if err := q.QueryRow(ctx, "SELECT current_schema(), current_setting('search_path'), current_database()").Scan(&name, &path, &db); err != nil {
		return "", MapErr(err, "resolving current_schema()")
	}
	if name == nil {
		// The schema is missing (a --schema the binaries put on the
		// search_path, a typo, another database): say so, as the ffriver
		// tables being missing is said (ff.ErrNotMigrated).
		return "", fmt.Errorf("%w: no schema of the connection's search_path (%s) exists in database %q: "+
			"check the schema's name and the database, or create and migrate it with `ffctl migrate --schema NAME`",
			ff.ErrNotMigrated, path, db)
	}
	return ParseSchema(*name)
}

// QueryRower is what Where and the checks below query: a pool, a
// connection or a transaction.
type QueryRower interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}

// Where returns the database q is connected to and whether schema s exists
// in it. It answers "?" and true when it cannot tell (the question failed):
// the caller's message then says less, not something false.
func (s Schema) Where(ctx context.Context, q QueryRower) (db string, exists bool) {
	if err := q.QueryRow(ctx, `SELECT current_database(), EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`,
		string(s)).Scan(&db, &exists); err != nil {
		return "?", true
	}
	return db, exists
}

// MissingError is the ff.ErrNotMigrated of a schema s that was named
// (not found on the search_path) and does not exist in database db.
func MissingError(s Schema, db string) error {
	return fmt.Errorf("%w: schema %q does not exist in database %q: check its name and the database, "+
		"or create and migrate it with migrations.Migrate (Go) or `ffctl migrate --schema %s`", ff.ErrNotMigrated, string(s), db, string(s))
}

// CheckExists returns a MissingError when s is named and does not exist in
// q's database; nil for the empty Schema (Resolve says what the
// search_path lacks) and when it cannot tell.
func (s Schema) CheckExists(ctx context.Context, q QueryRower) error {
	if s == "" {
		return nil
	}
	if db, exists := s.Where(ctx, q); !exists {
		return MissingError(s, db)
	}
	return nil
}

// NoTables explains, as an ff.ErrNotMigrated, why ffriver's tables are
// missing from schema s (resolved): s does not exist in q's database
// (MissingError), or exists without them.
func (s Schema) NoTables(ctx context.Context, q QueryRower) error {
	db, exists := s.Where(ctx, q)
	if !exists {
		return MissingError(s, db)
	}
	return fmt.Errorf("%w: schema %q of database %q has no ffriver tables; migrate it first with migrations.Migrate (Go) "+
		"or `ffctl migrate --schema %s`", ff.ErrNotMigrated, string(s), db, string(s))
}

// MapErr wraps a driver error with what was being done, adding
// ff.ErrUnavailable for connection failures and transient server errors so
// callers can branch on them.
func MapErr(err error, doing string) error {
	if err == nil {
		return nil
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) && strings.Contains(err.Error(), "\n") {
		err = &oneLineError{err: err}
	}
	if IsTransient(err) {
		return fmt.Errorf("%s: %w: %w", doing, ff.ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", doing, err)
}

// oneLineError is a connection error whose message says each distinct
// failure once, on one line: pgx's *pgconn.ConnectError lists every attempt
// on a line of its own, so with sslmode=prefer (TLS, then plain) a refused
// connection reads as the same "dial error" twice.
type oneLineError struct{ err error }

func (e *oneLineError) Error() string {
	lines := strings.Split(e.err.Error(), "\n")
	var out []string
	seen := map[string]bool{}
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || seen[l] {
			continue
		}
		seen[l] = true
		out = append(out, l)
	}
	if len(out) < 2 {
		return strings.Join(out, "")
	}
	return out[0] + " " + strings.Join(out[1:], "; ")
}

func (e *oneLineError) Unwrap() error { return e.err }

// IsTransient reports whether err is a connection failure or a server error
// worth retrying (serialization failure, deadlock, lock timeout, shutdown).
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "40001", "40P01", "55P03", "57P01", "57P02", "57P03", "53300", "08000", "08003", "08006", "08001", "08004":
			return true
		}
		return false
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		return true
	}
	if pgconn.SafeToRetry(err) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "conn closed") || strings.Contains(msg, "unexpected EOF") ||
		strings.Contains(msg, "connection reset") || strings.Contains(msg, "broken pipe")
}

// IsUndefinedTable reports whether err is Postgres's "relation does not exist".
func IsUndefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000" || pgErr.Code == "42883")
}

// IsLockTimeout reports whether err is Postgres's lock_not_available
// (55P03): a lock_timeout ran out, or a NOWAIT lock was refused.
func IsLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

// UUID returns u as pgx encodes natively. google/uuid's UUID implements
// driver.Valuer, which pgx honours by formatting it as text and parsing
// that back for every parameter: about a tenth of the apply engine's Go CPU
// in ffctl bench expire (perf), spent on ids.
func UUID(u uuid.UUID) [16]byte { return [16]byte(u) }

// NullUUID is UUID for a nullable id (nil: NULL).
func NullUUID(u *uuid.UUID) *[16]byte {
	if u == nil {
		return nil
	}
	b := [16]byte(*u)
	return &b
}
