package ffriver

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/internal/settings"
	"github.com/ffriver/ffriver/scanners"
	"github.com/ffriver/ffriver/workers"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Settings that every process of a schema must agree on are stored in the
// schema (ff_settings, migration 0017): the outbox and execution
// retentions, and each built-in scanner's interval and batch. The rule:
//
//   - A stored value wins over Config (and the binaries' flags). New warns,
//     naming both values, about each one Config sets explicitly (a non-zero
//     field) that disagrees with the stored one, and runs the stored one.
//   - With nothing stored, Config applies (its zero fields: the defaults).
//   - A scheduler (Config.StoreSettings; ffscheduler sets it) stores, at
//     New, each value it was given explicitly that is not stored yet: the
//     first scheduler started with a flag decides it for every later
//     process. Defaults are never stored.
//   - ffctl config set|unset (SetSetting, UnsetSetting) changes them. The
//     retentions apply from the next tick of whichever process leads, since
//     the ticks read them when they run (workers.StoredParamsProvider);
//     intervals and batches are fixed when a process starts (River's
//     periodic jobs), so they apply as processes restart, and so does a
//     change of execution_retention from "forever".
//
// ffctl status, the execution view and the retention auditor read the
// stored values too.

// SettingInfo describes a setting that can be stored in the schema.
type SettingInfo struct {
	// Name of the setting: outbox_retention, execution_retention,
	// <scanner>.interval, <scanner>.batch.
	Name string `json:"name"`
	// Flag is ffscheduler's flag that sets it.
	Flag string `json:"flag"`
	// Default is the value that applies when neither a stored value nor
	// the process's Config sets it.
	Default string `json:"default"`
	// Doc says what it sets and which values it takes.
	Doc string `json:"doc"`
}

// Setting is a setting stored in the schema.
type Setting struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	// SetBy says who stored it: "ffctl config set (user@host)", or the
	// scheduler that stored the value it was started with.
	SetBy string    `json:"set_by"`
	SetAt time.Time `json:"set_at"`
}

// settingDef is a SettingInfo with what a value of it does to a Config.
type settingDef struct {
	SettingInfo
	// check parses a value and returns its canonical text.
	check func(v string) (string, error)
	// get returns the value cfg sets explicitly (canonical), ok=false for
	// none (its zero value: the default).
	get func(cfg *Config) (string, bool)
	// set applies a checked value to cfg (whose Scanners map is the
	// caller's own copy).
	set func(cfg *Config, v string) error
}

// settingDefs are the settings, in the order ffctl config get lists them.
func settingDefs() []settingDef {
	retention := func(name string, forever bool) func(string) (string, error) {
		return func(v string) (string, error) {
			d, err := settings.ParseDuration(name, v, settings.MinRetention, settings.MaxRetention, forever)
			return settings.FormatDuration(d), err
		}
	}
	defs := []settingDef{{
		SettingInfo: SettingInfo{Name: scanners.OutboxRetention, Flag: "--outbox-retention", Default: scanners.DefaultOutboxRetention.String(),
			Doc: fmt.Sprintf("outbox events older than this are deleted: a duration, %s..%s", settings.MinRetention, settings.MaxRetention)},
		check: retention(scanners.OutboxRetention, false),
		get: func(cfg *Config) (string, bool) {
			return settings.FormatDuration(cfg.OutboxRetention), cfg.OutboxRetention > 0
		},
		set: func(cfg *Config, v string) error {
			d, err := settings.ParseDuration(scanners.OutboxRetention, v, settings.MinRetention, settings.MaxRetention, false)
			cfg.OutboxRetention = d
			return err
		},
	}, {
		SettingInfo: SettingInfo{Name: scanners.ExecutionRetention, Flag: "--execution-retention", Default: scanners.DefaultExecutionRetention.String(),
			Doc: fmt.Sprintf("terminal executions older than this are removed: a duration, %s..%s, or %q", settings.MinRetention,
				settings.MaxRetention, settings.Forever)},
		check: retention(scanners.ExecutionRetention, true),
		get: func(cfg *Config) (string, bool) {
			return settings.FormatDuration(cfg.ExecutionRetention), cfg.ExecutionRetention != 0
		},
		set: func(cfg *Config, v string) error {
			d, err := settings.ParseDuration(scanners.ExecutionRetention, v, settings.MinRetention, settings.MaxRetention, true)
			cfg.ExecutionRetention = d
			return err
		},
	}}
	for _, b := range scanners.Builtins(scanners.BuiltinOptions{}) {
		scanner, d := b.Scanner.Name(), b.Scanner.Defaults()
		flag := "--" + strings.ReplaceAll(scanner, "_", "-")
		interval, batch := scanner+".interval", scanner+".batch"
		defs = append(defs, settingDef{
			SettingInfo: SettingInfo{Name: interval, Flag: flag + "-interval", Default: d.Interval.String(),
				Doc: fmt.Sprintf("tick interval of the %s scanner: a duration, %s..%s", scanner, settings.MinInterval, settings.MaxInterval)},
			check: func(v string) (string, error) {
				d, err := settings.ParseDuration(interval, v, settings.MinInterval, settings.MaxInterval, false)
				return d.String(), err
			},
			get: func(cfg *Config) (string, bool) {
				iv := cfg.Scanners[scanner].Interval
				return iv.String(), iv != 0
			},
			set: func(cfg *Config, v string) error {
				d, err := settings.ParseDuration(interval, v, settings.MinInterval, settings.MaxInterval, false)
				o := cfg.Scanners[scanner]
				o.Interval = d
				cfg.Scanners[scanner] = o
				return err
			},
		}, settingDef{
			SettingInfo: SettingInfo{Name: batch, Flag: flag + "-batch", Default: strconv.Itoa(d.Batch),
				Doc: fmt.Sprintf("most candidates one %s scan selects: %d..%d", scanner, settings.MinBatch, settings.MaxBatch)},
			check: func(v string) (string, error) {
				n, err := settings.ParseInt(batch, v, settings.MinBatch, settings.MaxBatch)
				return strconv.Itoa(n), err
			},
			get: func(cfg *Config) (string, bool) {
				n := cfg.Scanners[scanner].Batch
				return strconv.Itoa(n), n != 0
			},
			set: func(cfg *Config, v string) error {
				n, err := settings.ParseInt(batch, v, settings.MinBatch, settings.MaxBatch)
				o := cfg.Scanners[scanner]
				o.Batch = n
				cfg.Scanners[scanner] = o
				return err
			},
		})
	}
	return defs
}

// KnownSettings returns the settings that can be stored in a schema, in
// the order ffctl config get lists them.
func KnownSettings() []SettingInfo {
	var out []SettingInfo
	for _, d := range settingDefs() {
		out = append(out, d.SettingInfo)
	}
	return out
}

// lookupSetting returns the definition of the setting called name, or a
// validation error naming it and listing the known ones.
func lookupSetting(name string) (settingDef, error) {
	defs := settingDefs()
	for _, d := range defs {
		if d.Name == name {
			return d, nil
		}
	}
	names := make([]string, len(defs))
	for i, d := range defs {
		names[i] = d.Name
	}
	return settingDef{}, ff.Validationf("setting", "%s is not a setting ffriver stores; known: %s", ff.Excerpt(name), strings.Join(names, ", "))
}

// CheckSetting checks value for the setting called name and returns its
// canonical text (the form it is stored in: 5s, 168h0m0s, forever, 1000).
// An unknown name or a bad value is a *ff.ValidationError that names the
// setting and what is wrong (a duration without a unit, a value out of
// range).
func CheckSetting(name, value string) (string, error) {
	d, err := lookupSetting(name)
	if err != nil {
		return "", err
	}
	return d.check(value)
}

// StoredSettings returns the settings stored in schema ("" = the pool's
// search_path), by name.
func StoredSettings(ctx context.Context, pool *pgxpool.Pool, schema string) ([]Setting, error) {
	s, err := dbutil.ParseSchema(schema)
	if err != nil {
		return nil, err
	}
	stored, err := settings.Load(ctx, pool, s)
	if err != nil {
		return nil, err
	}
	out := make([]Setting, 0, len(stored))
	for _, name := range slices.Sorted(maps.Keys(stored)) {
		out = append(out, settingOf(stored[name]))
	}
	return out, nil
}

func settingOf(st settings.Stored) Setting {
	return Setting{Name: st.Name, Value: st.Value, SetBy: st.SetBy, SetAt: st.SetAt}
}

// SetSetting checks value (CheckSetting) and stores it as the setting
// called name in schema, replacing any stored value; setBy says who sets
// it. Every process of the schema uses it: the retentions from the next
// tick, intervals and batches from each process's next start.
func SetSetting(ctx context.Context, pool *pgxpool.Pool, schema, name, value, setBy string) (Setting, error) {
	v, err := CheckSetting(name, value)
	if err != nil {
		return Setting{}, err
	}
	s, err := dbutil.ParseSchema(schema)
	if err != nil {
		return Setting{}, err
	}
	st, err := settings.Set(ctx, pool, s, name, v, setBy)
	return settingOf(st), err
}

// UnsetSetting deletes the stored setting called name from schema:
// processes then use their own Config (flags) again, the retentions from
// the next tick. It returns an error matching ff.ErrNotFound when none was
// stored, and a validation error for a name ffriver does not store.
func UnsetSetting(ctx context.Context, pool *pgxpool.Pool, schema, name string) error {
	if _, err := lookupSetting(name); err != nil {
		return err
	}
	s, err := dbutil.ParseSchema(schema)
	if err != nil {
		return err
	}
	ok, err := settings.Unset(ctx, pool, s, name)
	if err == nil && !ok {
		err = fmt.Errorf("%w: no stored setting %s", ff.ErrNotFound, name)
	}
	return err
}

// applySettings returns cfg with the schema's stored settings applied (the
// rule above), after storing the values cfg sets explicitly that are not
// stored yet when cfg.StoreSettings is set. It logs a warning for each
// value cfg sets that disagrees with the stored one. Scanner settings are
// applied only to the built-in scanners, when they are registered.
func applySettings(ctx context.Context, q settings.Querier, schema dbutil.Schema, cfg Config, logger *slog.Logger) (Config, error) {
	defs := settingDefs()
	if cfg.NoBuiltins {
		defs = defs[:2] // the retentions: the scanners are not registered
	}
	if cfg.StoreSettings {
		given := map[string]string{}
		for _, d := range defs {
			if v, ok := d.get(&cfg); ok {
				if _, err := d.check(v); err == nil { // New refuses the others, naming them
					given[d.Name] = v
				}
			}
		}
		by := cfg.SettingsSetBy
		if by == "" {
			host, _ := os.Hostname()
			by = fmt.Sprintf("a scheduler on %s (pid %d) at its start", host, os.Getpid())
		}
		stored, err := settings.StoreMissing(ctx, q, schema, given, by)
		if err != nil {
			return cfg, err
		}
		if len(stored) > 0 {
			slices.Sort(stored)
			logger.InfoContext(ctx, "ffriver: stored the settings this scheduler was given that the schema did not hold: every process of "+
				"the schema runs them from now on (ffctl config shows and changes them)", "settings", stored)
		}
	}
	stored, err := settings.Load(ctx, q, schema)
	if err != nil {
		return cfg, err
	}
	if len(stored) == 0 {
		return cfg, nil
	}
	cfg.Scanners = maps.Clone(cfg.Scanners)
	if cfg.Scanners == nil {
		cfg.Scanners = map[string]workers.Settings{}
	}
	for _, d := range defs {
		st, ok := stored[d.Name]
		if !ok {
			continue
		}
		if _, err := d.check(st.Value); err != nil {
			return cfg, fmt.Errorf("ffriver: the setting stored in the schema (ff_settings, set by %s at %s) cannot be used; "+
				"`ffctl config set %s VALUE` or `ffctl config unset %s` fixes it: %w", st.SetBy, st.SetAt.UTC().Format(time.RFC3339), d.Name, d.Name, err)
		}
		if given, ok := d.get(&cfg); ok && given != st.Value {
			logger.WarnContext(ctx, "ffriver: this process was given a setting that disagrees with the one stored in the schema: "+
				"it runs the stored one, as every process of the schema does (`ffctl config set "+d.Name+" VALUE` changes it for all)",
				"setting", d.Name, "flag", d.Flag, "given", given, "stored", st.Value, "using", st.Value,
				"stored_by", st.SetBy, "stored_at", st.SetAt.UTC().Format(time.RFC3339))
		}
		if err := d.set(&cfg, st.Value); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}
