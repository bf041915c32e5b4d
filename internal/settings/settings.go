// Package settings reads and writes ff_settings (migration 0017): the
// settings every process of a schema must agree on, stored in the schema.
// It parses and formats their values; which names exist, and what each one
// sets, is ffriver's (ffriver.KnownSettings).
package settings

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The allowed ranges of the stored values, the same as the flags'.
const (
	MinRetention = time.Second
	MaxRetention = 10 * 365 * 24 * time.Hour
	MinInterval  = 10 * time.Millisecond
	MaxInterval  = 24 * time.Hour
	MinBatch     = 1
	MaxBatch     = 100_000
)

// Forever is the value of a retention that keeps everything
// (execution_retention only).
const Forever = "forever"

// Stored is one row of ff_settings.
type Stored struct {
	Name  string
	Value string
	// SetBy says who stored it (ffctl config set, or the scheduler that
	// stored the value it was started with).
	SetBy string
	SetAt time.Time
}

// Querier is what reads and writes need: a pool, a connection or a
// transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Load returns every stored setting of schema, by name.
func Load(ctx context.Context, q Querier, s dbutil.Schema) (map[string]Stored, error) {
	rows, err := q.Query(ctx, s.SQL(`SELECT name, value, set_by, set_at FROM {S}ff_settings ORDER BY name`))
	if err != nil {
		return nil, dbutil.MapErr(err, "reading the stored settings")
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Stored, error) {
		var st Stored
		err := r.Scan(&st.Name, &st.Value, &st.SetBy, &st.SetAt)
		return st, err
	})
	if err != nil {
		return nil, dbutil.MapErr(err, "reading the stored settings")
	}
	out := make(map[string]Stored, len(list))
	for _, st := range list {
		out[st.Name] = st
	}
	return out, nil
}

// Get returns the stored setting called name; ok=false when none is
// stored.
func Get(ctx context.Context, q Querier, s dbutil.Schema, name string) (st Stored, ok bool, err error) {
	err = q.QueryRow(ctx, s.SQL(`SELECT name, value, set_by, set_at FROM {S}ff_settings WHERE name = $1`), name).
		Scan(&st.Name, &st.Value, &st.SetBy, &st.SetAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Stored{}, false, nil
	}
	if err != nil {
		return Stored{}, false, dbutil.MapErr(err, "reading the stored setting "+name)
	}
	return st, true, nil
}

// Set stores value (already checked and canonical) as the setting called
// name, replacing any stored one, in one statement.
func Set(ctx context.Context, q Querier, s dbutil.Schema, name, value, setBy string) (Stored, error) {
	st := Stored{Name: name, Value: value, SetBy: setBy}
	err := q.QueryRow(ctx, s.SQL(`INSERT INTO {S}ff_settings (name, value, set_by) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO UPDATE SET value = excluded.value, set_by = excluded.set_by, set_at = now()
		RETURNING set_at`), name, value, setBy).Scan(&st.SetAt)
	if err != nil {
		return Stored{}, dbutil.MapErr(err, "storing the setting "+name)
	}
	return st, nil
}

// StoreMissing stores each of values (name → checked, canonical value)
// whose name is not stored yet, in one statement, and returns the names it
// stored. A value stored meanwhile by another process is kept: the first
// writer decides.
func StoreMissing(ctx context.Context, q Querier, s dbutil.Schema, values map[string]string, setBy string) ([]string, error) {
	if len(values) == 0 {
		return nil, nil
	}
	names := make([]string, 0, len(values))
	vals := make([]string, 0, len(values))
	for n, v := range values {
		names, vals = append(names, n), append(vals, v)
	}
	rows, err := q.Query(ctx, s.SQL(`INSERT INTO {S}ff_settings (name, value, set_by)
		SELECT n, v, $3 FROM unnest($1::text[], $2::text[]) AS x(n, v)
		ON CONFLICT (name) DO NOTHING RETURNING name`), names, vals, setBy)
	if err != nil {
		return nil, dbutil.MapErr(err, "storing the settings")
	}
	stored, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, dbutil.MapErr(err, "storing the settings")
	}
	return stored, nil
}

// Unset deletes the stored setting called name; ok=false when none was
// stored.
func Unset(ctx context.Context, q Querier, s dbutil.Schema, name string) (ok bool, err error) {
	tag, err := q.Exec(ctx, s.SQL(`DELETE FROM {S}ff_settings WHERE name = $1`), name)
	if err != nil {
		return false, dbutil.MapErr(err, "deleting the stored setting "+name)
	}
	return tag.RowsAffected() > 0, nil
}

// ParseDuration parses the value v of the setting called name as a
// duration within min..max (forever: or Forever, returned as -1). Its
// errors are *ff.ValidationError naming the setting and what is wrong.
func ParseDuration(name, v string, min, max time.Duration, forever bool) (time.Duration, error) {
	if forever && v == Forever {
		return -1, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		want := "a duration with a unit, such as 90s, 15m or 168h"
		if forever {
			want += `, or "forever"`
		}
		if _, nerr := strconv.ParseFloat(v, 64); nerr == nil {
			return 0, ff.Validationf(name, "%s has no unit: want %s", ff.Excerpt(v), want)
		}
		return 0, ff.Validationf(name, "%s is not a duration: want %s", ff.Excerpt(v), want)
	}
	if d < min || d > max {
		also := ""
		if forever {
			also = ` (or "forever")`
		}
		return 0, ff.Validationf(name, "%s is outside the allowed range %s..%s%s", d, min, max, also)
	}
	return d, nil
}

// FormatDuration is the canonical text of a duration setting's value
// (Forever for -1 where forever is allowed).
func FormatDuration(d time.Duration) string {
	if d < 0 {
		return Forever
	}
	return d.String()
}

// ParseInt parses the value v of the setting called name as an integer
// within min..max.
func ParseInt(name, v string, min, max int) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, ff.Validationf(name, "%s is not a whole number", ff.Excerpt(v))
	}
	if n < min || n > max {
		return 0, ff.Validationf(name, "%d is outside the allowed range %d..%d", n, min, max)
	}
	return n, nil
}
