package ffriver_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/pipeline"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/scanners"
	"github.com/ffriver/ffriver/workers"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// Issue 40, item 2: two schedulers of one schema started with different
// retentions. The first stores what it was given; the second says at start
// that its own disagree and runs the stored ones, so when it takes over
// (the first never runs here) retention is what the schema stores, not its
// flags. A value changed in the schema while it runs applies from its next
// tick, without a restart.
func TestStoredSettingsWinOverConfigAfterTakeover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, nil)
	sql := &fftest.DB{TB: t, Ctx: ctx, Pool: db.Pool}
	// Only outbox_retention ticks, fast.
	only := func() map[string]workers.Settings {
		m := map[string]workers.Settings{}
		for _, b := range scanners.Builtins(scanners.BuiltinOptions{}) {
			m[b.Scanner.Name()] = workers.Settings{Disabled: true}
		}
		m[scanners.OutboxRetention] = workers.Settings{Interval: 50 * time.Millisecond}
		return m
	}

	var logA, logB syncBuf
	_, err := ffriver.New(ctx, db.Pool, ffriver.Config{Schema: db.Schema, Scanners: only(), StoreSettings: true, SettingsSetBy: "scheduler A",
		OutboxRetention: time.Hour, ExecutionRetention: 2 * time.Hour, Logger: slog.New(slog.NewTextHandler(&logA, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logA.String(), "stored the settings") {
		t.Errorf("the first scheduler did not say it stored its settings: %s", logA.String())
	}
	b, err := ffriver.New(ctx, db.Pool, ffriver.Config{Schema: db.Schema, Scanners: only(), StoreSettings: true, SettingsSetBy: "scheduler B",
		OutboxRetention: 30 * 24 * time.Hour, Logger: slog.New(slog.NewTextHandler(&logB, nil))})
	if err != nil {
		t.Fatal(err)
	}
	// B was given another outbox retention: it says so, naming both and
	// the one it runs; it was given no execution retention: nothing to say.
	warn := logB.String()
	for _, want := range []string{"level=WARN", "setting=outbox_retention", "given=720h0m0s", "stored=1h0m0s", "using=1h0m0s", `stored_by="scheduler A"`} {
		if !strings.Contains(warn, want) {
			t.Errorf("scheduler B's log lacks %q:\n%s", want, warn)
		}
	}
	if strings.Contains(warn, "setting=execution_retention") {
		t.Errorf("scheduler B warned about a setting it was not given:\n%s", warn)
	}
	if got := b.OutboxRetention(); got != time.Hour {
		t.Errorf("B's outbox retention = %s, want the stored 1h", got)
	}
	if got := b.ExecutionRetention(); got != 2*time.Hour {
		t.Errorf("B's execution retention = %s, want the stored 2h", got)
	}
	// The ticks B's leader inserts carry the stored retention.
	args, err := pipeline.Of(b).TickArgs(scanners.ExecutionRetention)
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		AgeMs int64 `json:"age_ms"`
	}
	raw, _ := json.Marshal(args)
	var tick struct {
		Params json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal(raw, &tick); err != nil || json.Unmarshal(tick.Params, &p) != nil || p.AgeMs != (2*time.Hour).Milliseconds() {
		t.Errorf("B's execution_retention tick params = %s, want age_ms %d", tick.Params, (2 * time.Hour).Milliseconds())
	}
	stored, err := ffriver.StoredSettings(ctx, db.Pool, db.Schema)
	if err != nil {
		t.Fatal(err)
	}
	// A stored what it was given explicitly (its retentions, the one
	// interval set), not its defaults; B stored nothing over them.
	if len(stored) != 3 || stored[0].Name != scanners.ExecutionRetention || stored[0].Value != "2h0m0s" ||
		stored[1].Name != scanners.OutboxRetention || stored[1].Value != "1h0m0s" || stored[1].SetBy != "scheduler A" ||
		stored[2].Name != "outbox_retention.interval" || stored[2].Value != "50ms" {
		t.Errorf("stored settings = %+v, want A's two retentions and its outbox_retention interval", stored)
	}

	// Events written long ago, in the DEFAULT partition (no time partition
	// covers the past): older than the stored hour, younger than B's 30 days.
	insertOld := func(age time.Duration, n int) {
		t.Helper()
		sql.Exec(`INSERT INTO ff_lease_event (execution_id, event_type, occurred_at_ms, written_at_ms, partition_key)
			SELECT gen_random_uuid()::text, 'renewed', $1::bigint, $1::bigint, 0 FROM generate_series(1, $2)`,
			time.Now().Add(-age).UnixMilli(), n)
	}
	older := func(age time.Duration) int {
		return sql.Count(`SELECT count(*) FROM ff_lease_event WHERE occurred_at_ms < $1`, time.Now().Add(-age).UnixMilli())
	}
	insertOld(2*time.Hour, 5)

	// B leads.
	rc, err := b.SchedulerConfig(ffriver.ClientOptions{ScanWorkers: 2, ApplyWorkers: 2, TestOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	rc.FetchPollInterval = 50 * time.Millisecond
	c, err := river.NewClient(riverpgxv5.New(db.Pool), rc)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(sctx)
	})
	fftest.Await(t, 30*time.Second, "the events older than the stored retention to be deleted", func() bool { return older(time.Hour) == 0 })

	// The retention changed in the schema while B runs: its next ticks
	// use it (B was built with 1 h).
	if _, err := ffriver.SetSetting(ctx, db.Pool, db.Schema, scanners.OutboxRetention, "10m", "operator"); err != nil {
		t.Fatal(err)
	}
	insertOld(30*time.Minute, 5)
	fftest.Await(t, 30*time.Second, "the events older than the new stored retention to be deleted", func() bool { return older(10*time.Minute) == 0 })
}

// Setting names and values are checked, with errors that name the setting
// and what is wrong; unsetting what is not stored is not found.
func TestSettingChecks(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, value, want, err string }{
		{"outbox_retention", "5s", "5s", ""},
		{"outbox_retention", "168h", "168h0m0s", ""},
		{"execution_retention", "forever", "forever", ""},
		{"attempt_timeout.interval", "250ms", "250ms", ""},
		{"edge_cancel_dispatcher.batch", "50", "50", ""},
		{"outbox_retention", "5", "", `invalid outbox_retention: "5" has no unit`},
		{"outbox_retention", "forever", "", `invalid outbox_retention: "forever" is not a duration`},
		{"outbox_retention", "500ms", "", "outside the allowed range 1s.."},
		{"attempt_timeout.batch", "0", "", "invalid attempt_timeout.batch: 0 is outside the allowed range 1..100000"},
		{"attempt_timeout.batch", "many", "", `"many" is not a whole number`},
		{"outbox_retension", "5s", "", `invalid setting: "outbox_retension" is not a setting ffriver stores; known: outbox_retention, execution_retention,`},
	} {
		got, err := ffriver.CheckSetting(c.name, c.value)
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("CheckSetting(%q, %q) = %q, %v; want %q", c.name, c.value, got, err, c.want)
		case c.err != "" && (err == nil || !errors.Is(err, ff.ErrValidation) || !strings.Contains(err.Error(), c.err)):
			t.Errorf("CheckSetting(%q, %q) = %q, %v; want a validation error containing %q", c.name, c.value, got, err, c.err)
		}
	}
	ctx := context.Background()
	db := testdb.New(t, nil)
	if err := ffriver.UnsetSetting(ctx, db.Pool, db.Schema, scanners.OutboxRetention); !errors.Is(err, ff.ErrNotFound) {
		t.Errorf("UnsetSetting of nothing stored = %v, want ErrNotFound", err)
	}
	// A value written by hand that no process can use stops New, naming it.
	if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO ff_settings (name, value, set_by) VALUES ('outbox_retention', 'a week', 'psql')`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	_, err := ffriver.New(ctx, db.Pool, ffriver.Config{Schema: db.Schema})
	if err == nil || !strings.Contains(err.Error(), "ffctl config set outbox_retention") || !strings.Contains(err.Error(), `"a week" is not a duration`) {
		t.Errorf("New with an unusable stored setting = %v, want an error naming it and the command that fixes it", err)
	}
}
