package pipeline

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// Skipping items already in flight.
//
// Pinned to River v0.51 (github.com/riverqueue/river v0.51.x): this file
// mirrors how that version computes a job's unique_key (its internal
// dbunique package) and the predicate of river_job_unique_idx. Check it, and
// run TestInFlightKeyMatchesRiver, on every River upgrade.
//
// A tick schedules a scan of every partition with due work each interval,
// and an item stays due until its job has committed. While a backlog drains
// (or whenever items take longer than an interval), every scan re-selects
// the candidates whose jobs are still queued and re-inserts them. River's
// unique insert then skips each one with ON CONFLICT DO UPDATE, which writes
// a new version of the queued job's row and waits on its row lock when that
// job's transaction holds it: in ffctl bench expire, 20,000 expired leases
// drained by default settings cost about 270,000 such duplicate inserts.
//
// So a scan first asks River's unique index which of its items are already
// in flight and inserts only the others. The key is computed as River
// computes it for jobopts.UniqueInFlight (ByArgs over all fields, ByState; no
// period, no queue): sha256("&kind=" + kind + "&args=" + the encoded args
// with their top-level keys sorted). Args with `river:"unique"` field tags
// are not pre-checked. The check only saves work: River's unique insert
// stays the guarantee (a job finishing or starting between the check and
// the insert is handled by it as before), and a key River would compute
// differently (a River upgrade changing the format; TestInFlightKeyMatchesRiver
// guards it) would merely match nothing.

// inFlightKey returns River's unique_key of a job of args inserted with
// jobopts.UniqueInFlight, and ok=false when args cannot be pre-checked.
func inFlightKey(args river.JobArgs) (key []byte, ok bool, err error) {
	if hasUniqueTags(reflect.TypeOf(args)) {
		return nil, false, nil
	}
	encoded, err := json.Marshal(args)
	if err != nil {
		return nil, false, fmt.Errorf("encoding item %s: %w", args.Kind(), err)
	}
	sorted, ok := sortedObject(encoded)
	if !ok {
		return nil, false, nil
	}
	sum := sha256.Sum256([]byte("&kind=" + args.Kind() + "&args=" + sorted))
	return sum[:], true, nil
}

// sortedObject re-encodes a JSON object with its top-level keys sorted and
// their values as they were, as River's unique key does; ok=false for
// anything River would encode differently (not an object, a key needing
// escapes).
func sortedObject(encoded []byte) (string, bool) {
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(encoded))
	if err := dec.Decode(&fields); err != nil || fields == nil {
		return "", false
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		for i := range len(k) {
			if k[i] < ' ' || k[i] > 0x7f || k[i] == '"' || k[i] == '\\' {
				return "", false
			}
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"` + k + `":`)
		b.Write(fields[k])
	}
	b.WriteByte('}')
	return b.String(), true
}

var uniqueTagCache sync.Map // reflect.Type -> bool

// hasUniqueTags reports whether t (a struct or a pointer to one) has a
// field, at any depth, tagged river:"unique".
func hasUniqueTags(t reflect.Type) bool {
	if v, ok := uniqueTagCache.Load(t); ok {
		return v.(bool)
	}
	found := walkUniqueTags(t, map[reflect.Type]bool{})
	uniqueTagCache.Store(t, found)
	return found
}

func walkUniqueTags(t reflect.Type, seen map[reflect.Type]bool) bool {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || seen[t] {
		return false
	}
	seen[t] = true
	for i := range t.NumField() {
		f := t.Field(i)
		if slices.Contains(strings.Split(f.Tag.Get("river"), ","), "unique") {
			return true
		}
		if walkUniqueTags(f.Type, seen) {
			return true
		}
	}
	return false
}

// skipInFlight drops from params the jobs River already holds in flight
// (same unique key, in a state of jobopts.InFlight), looked up in riverSchema's
// river_job through its unique index. It returns the params left and how
// many it dropped.
func skipInFlight(ctx context.Context, tx pgx.Tx, riverSchema string, params []river.InsertManyParams) ([]river.InsertManyParams, int, error) {
	if len(params) == 0 {
		return params, 0, nil
	}
	keys := make([][]byte, len(params))
	var lookup [][]byte
	for i, p := range params {
		k, ok, err := inFlightKey(p.Args)
		if err != nil {
			return nil, 0, err
		}
		if ok {
			keys[i] = k
			lookup = append(lookup, k)
		}
	}
	if len(lookup) == 0 {
		return params, 0, nil
	}
	// The predicate is the one of river_job_unique_idx, so the index serves it.
	s := dbutil.Schema(riverSchema)
	rows, err := tx.Query(ctx, s.SQL(`SELECT unique_key FROM {S}river_job
		WHERE unique_key = ANY($1::bytea[]) AND unique_key IS NOT NULL AND unique_states IS NOT NULL
		  AND {S}river_job_state_in_bitmask(unique_states, state)`), lookup)
	if err != nil {
		return nil, 0, dbutil.MapErr(err, "looking up items in flight")
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		return nil, 0, dbutil.MapErr(err, "looking up items in flight")
	}
	if len(found) == 0 {
		return params, 0, nil
	}
	inFlight := make(map[string]bool, len(found))
	for _, k := range found {
		inFlight[string(k)] = true
	}
	out := params[:0:0]
	for i, p := range params {
		if keys[i] != nil && inFlight[string(keys[i])] {
			continue
		}
		out = append(out, p)
	}
	return out, len(params) - len(out), nil
}
