package main

import "testing"

// The kept schema's commands export the demo's database URL, with a
// password left for the reader to fill in rather than printed.
func TestKeepURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"postgres://u@h:5433/db?sslmode=disable", "postgres://u@h:5433/db?sslmode=disable"},
		{"postgres://u:s3cret@h/db", "postgres://u:PASSWORD@h/db"},
	} {
		if got := keepURL(tc.in); got != tc.want {
			t.Errorf("keepURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
