package cli

import (
	"strconv"
	"time"

	"github.com/ffriver/ffriver/ff"
)

// CheckInt returns a usage error naming --name and its allowed range when n
// is outside min..max: a bad value never falls back to a default silently.
func CheckInt(name string, n, min, max int) error {
	if n < min || n > max {
		return Usagef("--%s %d is outside the allowed range %s..%s", name, n, strconv.Itoa(min), strconv.Itoa(max))
	}
	return nil
}

// CheckDuration returns a usage error naming --name and its allowed range
// when d is outside min..max.
func CheckDuration(name string, d, min, max time.Duration) error {
	if d < min || d > max {
		return Usagef("--%s %s is outside the allowed range %s..%s", name, d, min, max)
	}
	return nil
}

// FirstError returns the first non-nil error of errs.
func FirstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// CheckText checks the value of flag --name as the store checks a stored
// value of its kind (ff.CheckText: valid UTF-8, no NUL byte, at most max
// bytes), so that a value is refused on the command line before it reaches
// SQL, with an error that quotes at most its beginning.
func CheckText(name, v string, max int) error {
	if err := ff.CheckText("--"+name, v, false, max); err != nil {
		return &UsageError{Err: err}
	}
	return nil
}
