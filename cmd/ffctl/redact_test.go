package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// badConnStrings are malformed or failing connection strings of every form
// libpq accepts, each with its password: issue 11's runs printed most of
// them. The server at 127.0.0.1:1 refuses connections.
var badConnStrings = []struct{ conn, pw string }{
	{"postgres://u:Secr3tPW@127.0.0.1:1/db", "Secr3tPW"},
	{"postgres://u:Secr3tPW@[::1:5432/db", "Secr3tPW"},
	{"postgres://u:Secr3tPW%zz@127.0.0.1:1/db", "Secr3tPW"},
	{"postgres://u:Secr3t PW@127.0.0.1:1/db", "Secr3t PW"},
	{"postgres://u@127.0.0.1:1/db?password=Secr3tPW", "Secr3tPW"},
	{"postgres://u@127.0.0.1:1/db?sslmode=disable&password=Secr3t%20PW", "Secr3t PW"},
	{"host=127.0.0.1 port=1 user=u password = Secr3tPW dbname=db", "Secr3tPW"},
	{"host=127.0.0.1 port=1 user=u password='Secr3t PW' dbname=db", "Secr3t PW"},
	{"host=127.0.0.1 port=1 user=u password='Secr3t PW", "Secr3t PW"},
	{"host=127.0.0.1 port=x password=Secr3tPW", "Secr3tPW"},
}

// TestCommandsNeverPrintThePassword runs ffctl's commands with each bad
// connection string: they fail (usage error or unreachable), and nothing they
// print, errors or log lines, shows the password, whole or its first half.
func TestCommandsNeverPrintThePassword(t *testing.T) {
	t.Parallel()
	for _, c := range badConnStrings {
		var stdout, stderr bytes.Buffer
		code := runStatus(context.Background(), []string{"--database-url", c.conn}, &stdout, &stderr)
		env := map[string]string{"DATABASE_URL": c.conn, "TERM": "dumb"}
		code2 := runDemo(context.Background(), []string{"--duration", "1s", "--ui-addr", "off", "--log-level", "debug"}, &stdout, &stderr,
			func(k string) string { return env[k] })
		out := stdout.String() + stderr.String()
		if code == 0 || code2 == 0 {
			t.Errorf("%q: exits %d and %d", c.conn, code, code2)
		}
		if strings.Contains(out, c.pw) || strings.Contains(out, c.pw[:len(c.pw)/2+1]) {
			t.Errorf("%q: the output shows the password:\n%s", c.conn, out)
		}
		if !strings.Contains(out, "xxxxx") && !strings.Contains(out, "127.0.0.1") {
			t.Errorf("%q: the output does not say which database:\n%s", c.conn, out)
		}
	}
}
