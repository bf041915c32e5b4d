package ff

import "strings"

// InstanceTagKey is the execution tag whose value outbox rows carry in their
// instance_tag column (upstream convention).
const InstanceTagKey = "cairn.instance_id"

// Tag is one key=value pair.
type Tag struct {
	Key   string
	Value string
}

// String returns "key=value".
func (t Tag) String() string { return t.Key + "=" + t.Value }

// ParseTag parses a "key=value" flag value. The key must be non-empty; the
// value may be empty and may itself contain '='. Key and value are checked
// as the store checks an execution's tags (CheckText).
func ParseTag(s string) (Tag, error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		return Tag{}, Validationf("instance_tag", "%s: want key=value", Excerpt(s))
	}
	if strings.TrimSpace(k) == "" {
		return Tag{}, Validationf("instance_tag", "%s: the key is empty", Excerpt(s))
	}
	t := Tag{Key: k, Value: v}
	return t, t.validate()
}

func (t Tag) validate() error {
	if t.Key == "" {
		return Validationf("instance_tag", "the key is empty")
	}
	if err := CheckText("instance_tag key", t.Key, true, MaxName); err != nil {
		return err
	}
	return CheckText("instance_tag value", t.Value, false, MaxTagValue)
}

// Filter narrows scanners and streams to one tenant. The zero value matches
// everything.
//
// Scanners compare Namespace with the execution's namespace and InstanceTag
// with the execution's tag of that key. Streams compare against the columns
// copied onto each outbox row: the namespace, and the value of the
// execution's "cairn.instance_id" tag (so for streams only InstanceTag.Value
// matters, as upstream). A row whose column is NULL never matches a set
// dimension.
type Filter struct {
	Namespace   string
	InstanceTag *Tag
}

// IsZero reports whether the filter matches everything.
func (f Filter) IsZero() bool { return f.Namespace == "" && f.InstanceTag == nil }

// Validate rejects filters that cannot be stored or compared: the
// namespace and the tag are checked as the store checks an execution's
// (CheckText).
func (f Filter) Validate() error {
	if err := CheckText("namespace", f.Namespace, false, MaxName); err != nil {
		return err
	}
	if f.InstanceTag != nil {
		return f.InstanceTag.validate()
	}
	return nil
}

// MatchesRow reports whether an outbox row with the given namespace and
// instance_tag columns (nil for NULL) passes the filter.
func (f Filter) MatchesRow(namespace, instanceTag *string) bool {
	if f.Namespace != "" && (namespace == nil || *namespace != f.Namespace) {
		return false
	}
	if f.InstanceTag != nil && (instanceTag == nil || *instanceTag != f.InstanceTag.Value) {
		return false
	}
	return true
}

// SQLArgs returns the filter as two nullable SQL parameters, the namespace
// and the tag as a one-pair JSON object, for predicates of the form
//
//	($1::text IS NULL OR raw_fields->>'namespace' = $1)
//	AND ($2::jsonb IS NULL OR raw_fields->'tags' @> $2)
//
// Filter values are always passed as parameters, never spliced into SQL.
func (f Filter) SQLArgs() (namespace *string, tagJSON *map[string]string) {
	if f.Namespace != "" {
		ns := f.Namespace
		namespace = &ns
	}
	if f.InstanceTag != nil {
		m := map[string]string{f.InstanceTag.Key: f.InstanceTag.Value}
		tagJSON = &m
	}
	return namespace, tagJSON
}
