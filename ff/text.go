package ff

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// The longest values ffriver stores, in bytes. Every entry point (the Go
// API, the command-line flags, the execution view) checks a value against
// the limit of its kind with CheckText, so a value is accepted everywhere or
// nowhere.
const (
	// MaxName: lanes, namespaces, worker ids, capabilities, tag keys,
	// consumer names, who cancelled.
	MaxName = 255
	// MaxTagValue: the value of an execution tag.
	MaxTagValue = 4096
	// MaxReason: a cancellation or revoke reason.
	MaxReason = 1024
	// MaxMessage: a failure message.
	MaxMessage = 64 << 10
)

// quotedPrefix is how many bytes of a rejected value an error quotes.
const quotedPrefix = 32

// CheckText checks a text value of field: valid UTF-8 (Postgres refuses
// anything else), no NUL byte (Postgres text cannot hold one) and at most
// max bytes. required rejects the empty string. The error quotes at most
// the first 32 bytes of the value.
func CheckText(field, v string, required bool, max int) error {
	if v == "" {
		if required {
			return Validationf(field, "is required")
		}
		return nil
	}
	if !utf8.ValidString(v) {
		return Validationf(field, "%s is not valid UTF-8", Excerpt(v))
	}
	if strings.ContainsRune(v, 0) {
		return Validationf(field, "%s contains a NUL byte", Excerpt(v))
	}
	if len(v) > max {
		return Validationf(field, "%s is %d bytes, longer than %d", Excerpt(v), len(v), max)
	}
	return nil
}

// Excerpt quotes v for an error message: whole when it is short, else its
// first 32 bytes (cut on a character boundary) and how long it is, so that
// a huge argument is never echoed in full.
func Excerpt(v string) string {
	if len(v) <= quotedPrefix {
		return strconv.Quote(v)
	}
	cut := quotedPrefix
	for cut > 0 && !utf8.RuneStart(v[cut]) {
		cut--
	}
	return strconv.Quote(v[:cut]) + "…"
}
