package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/ffriver/ffriver/cmd/internal/cli"
)

// textFlagCases are the flags of ffctl that carry a stored kind of text
// (a name, a namespace, a lane, a reason, a tag, a consumer).
var textFlagCases = [][]string{
	{"exec", "list", "--namespace", "%s"},
	{"exec", "list", "--lane", "%s"},
	{"exec", "list", "--state", "%s"},
	{"exec", "cancel", "{fp:1}:5f0c0e6c-8d5b-4c1e-9a53-3c0e8f7a1b2c", "--reason", "%s"},
	{"exec", "cancel", "{fp:1}:5f0c0e6c-8d5b-4c1e-9a53-3c0e8f7a1b2c", "--by", "%s"},
	{"exec", "revoke", "{fp:1}:5f0c0e6c-8d5b-4c1e-9a53-3c0e8f7a1b2c", "--reason", "%s"},
	{"tail", "--namespace", "%s"},
	{"tail", "--consumer", "%s"},
	{"tail", "--instance-tag", "k=%s"},
	{"consumer", "drop", "%s", "--stream", "leases"},
}

// runArgs runs ffctl with args, value substituted for %s, against a
// server that does not answer: what is refused is refused before any SQL.
func runArgs(args []string, value string) (int, string) {
	var stderr bytes.Buffer
	a := make([]string, len(args))
	for i, s := range args {
		a[i] = strings.ReplaceAll(s, "%s", value)
	}
	a = append(a, "--database-url", "postgres://u@127.0.0.1:1/db?connect_timeout=2")
	var code int
	switch a[0] {
	case "exec":
		code = runExec(context.Background(), a[1:], &bytes.Buffer{}, &stderr)
	case "tail":
		// Not waiting for the server (--startup-wait) to come.
		code = runTail(context.Background(), append(a[1:], "--startup-wait", "0"), &bytes.Buffer{}, &stderr)
	case "consumer":
		code = runConsumer(context.Background(), a[1:], &bytes.Buffer{}, &stderr)
	}
	return code, stderr.String()
}

// Invalid UTF-8 and oversized values are refused by every command that
// takes a stored kind of text, as a usage error naming the flag, before
// they reach SQL; the error quotes only the value's beginning.
func TestTextFlagsRefuseBadBytes(t *testing.T) {
	huge := strings.Repeat("n", 128<<10)
	for _, args := range textFlagCases {
		for _, v := range []struct{ value, want string }{{"a\xffb", "not valid UTF-8"}, {huge, "longer than"}} {
			code, stderr := runArgs(args, v.value)
			if code != cli.ExitUsage || !strings.Contains(stderr, v.want) {
				t.Errorf("%q with a %d-byte value: exit %d, stderr %.300q; want %d saying %q", args, len(v.value), code, stderr, cli.ExitUsage, v.want)
			}
			if len(stderr) > 600 || strings.Contains(stderr, "SQLSTATE") || strings.Contains(stderr, "invalid byte sequence") {
				t.Errorf("%q: stderr is %d bytes or names SQL: %.300q", args, len(stderr), stderr)
			}
		}
	}
}

// FuzzTextFlags: whatever the value, every command that takes a stored kind
// of text answers with an exit code and a short message: no panic, no
// stack, no SQL error text, no echo of a huge value.
func FuzzTextFlags(f *testing.F) {
	for _, s := range []string{"tenant-a", "a\xffb", "", "\x00", "'; DROP TABLE x; --", strings.Repeat("é", 300), "k=v=w"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, value string) {
		for _, args := range textFlagCases {
			code, stderr := runArgs(args, value)
			if code == cli.ExitOK {
				continue
			}
			for _, bad := range []string{"SQLSTATE", "goroutine ", "panic", "invalid byte sequence"} {
				if strings.Contains(stderr, bad) {
					t.Fatalf("%q with %q: stderr says %q: %s", args, value, bad, stderr)
				}
			}
			if len(stderr) > 1200 {
				t.Fatalf("%q with a %d-byte value: stderr is %d bytes", args, len(value), len(stderr))
			}
		}
	})
}
