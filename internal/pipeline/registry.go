package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/internal/settings"
	"github.com/ffriver/ffriver/workers"
)

var nameRe = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)

// registry holds the scanners of one pipeline, by name, in registration
// order. Built-in scanners are registered exactly like a user's own. It is
// not safe for concurrent Register calls; build it before the River client.
type registry struct {
	byName map[string]workers.Scanner
	order  []string
}

// newRegistry returns an empty registry.
func newRegistry() *registry { return &registry{byName: map[string]workers.Scanner{}} }

// Register adds s. Names must be valid and unique; defaults must have a
// positive interval and batch.
func (r *registry) Register(s workers.Scanner) error {
	name := s.Name()
	if !nameRe.MatchString(name) {
		return ff.Validationf("scanner", "name %q: want lowercase letters, digits and underscores, starting with a letter", name)
	}
	if _, dup := r.byName[name]; dup {
		return ff.Validationf("scanner", "%q is registered twice", name)
	}
	if d := s.Defaults(); d.Interval <= 0 || d.Batch <= 0 {
		return ff.Validationf("scanner", "%q: default interval %s and batch %d must be positive", name, d.Interval, d.Batch)
	}
	r.byName[name] = s
	r.order = append(r.order, name)
	return nil
}

// Lookup returns the scanner called name.
func (r *registry) Lookup(name string) (workers.Scanner, bool) {
	s, ok := r.byName[name]
	return s, ok
}

// Scanners returns the registered scanners in registration order.
func (r *registry) Scanners() []workers.Scanner {
	out := make([]workers.Scanner, 0, len(r.order))
	for _, n := range r.order {
		out = append(out, r.byName[n])
	}
	return out
}

// Names returns the registered names in registration order.
func (r *registry) Names() []string { return append([]string(nil), r.order...) }

// storedParams returns the params of s's stored setting
// (StoredParamsProvider) read on q, else def.
func (p *Pipeline) storedParams(ctx context.Context, q workers.Querier, s workers.Scanner, def json.RawMessage) (json.RawMessage, error) {
	sp, ok := s.(workers.StoredParamsProvider)
	if !ok {
		return def, nil
	}
	st, ok, err := settings.Get(ctx, q, dbutil.Schema(p.env.Schema()), sp.StoredSetting())
	if err != nil || !ok {
		return def, err
	}
	params, err := sp.StoredParams(st.Value)
	if err != nil {
		return nil, fmt.Errorf("scanner %s: the stored setting (ff_settings; ffctl config set or unset fixes it): %w", s.Name(), err)
	}
	return params, nil
}

// ParamsOf returns s's params (ParamsProvider), nil when it has none.
func ParamsOf(s workers.Scanner) (json.RawMessage, error) {
	p, ok := s.(workers.ParamsProvider)
	if !ok {
		return nil, nil
	}
	b, err := p.Params()
	if err != nil {
		return nil, fmt.Errorf("scanner %s: params: %w", s.Name(), err)
	}
	return b, nil
}

// AuditCap is the most rows that look due an audit reads: it classifies
// the first AuditCap+1 its statement finds (the oldest first, where it
// reads them through the due index) and reports what it found among them,
// AtLeast when there were more. An audit is then as bounded as a due read,
// however large the backlog (counting every expired lease of a backlog of
// 10,000 was 39 ms of a 150 ms ffctl status). Rows no scan can process are
// never removed by one, so they stay among the oldest that look due once
// the processable backlog ahead of them has drained.
const AuditCap = 1000
