package redact_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver/internal/redact"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// cases are connection strings of every form libpq accepts, well-formed and
// not, each with its password. The issue 11 runs printed most of them.
var cases = []struct{ conn, pw, keep string }{
	{"postgres://u:Secr3tPW@127.0.0.1:1/db", "Secr3tPW", "postgres://u:xxxxx@127.0.0.1:1/db"},
	{"postgres://u:Secr3tPW@[::1:5432/db", "Secr3tPW", "postgres://u:xxxxx@[::1:5432/db"},
	{"postgres://u:Secr3tPW%zz@127.0.0.1:1/db", "Secr3tPW%zz", "postgres://u:xxxxx@127.0.0.1:1/db"},
	{"postgres://u:Secr3t PW@127.0.0.1:1/db", "Secr3t PW", "postgres://u:xxxxx@127.0.0.1:1/db"},
	{"postgres://u:Se@cr/3t?PW@127.0.0.1:1/db", "Se@cr/3t?PW", "postgres://u:xxxxx@127.0.0.1:1/db"},
	{"postgresql://u:Secr%403tPW@127.0.0.1:1/db", "Secr@3tPW", "postgresql://u:xxxxx@127.0.0.1:1/db"},
	{"postgres://u@127.0.0.1:1/db?password=Secr3tPW", "Secr3tPW", "postgres://u@127.0.0.1:1/db?password=xxxxx"},
	{"postgres://u@127.0.0.1:1/db?sslmode=disable&password=Secr3t%20PW&connect_timeout=2", "Secr3t PW", "?sslmode=disable&password=xxxxx&connect_timeout=2"},
	{"postgres://u@127.0.0.1:1/db?pass%77ord=Secr3tPW", "Secr3tPW", "pass%77ord=xxxxx"},
	{"postgres://u@[::1:1/db?password=Secr3tPW", "Secr3tPW", "password=xxxxx"},
	{"postgres://u@127.0.0.1:1/db?sslpassword=Secr3tPW", "Secr3tPW", "sslpassword=xxxxx"},
	{"host=127.0.0.1 port=1 user=u password=Secr3tPW dbname=db", "Secr3tPW", "host=127.0.0.1 port=1 user=u password=xxxxx dbname=db"},
	{"host=127.0.0.1 port=1 user=u password = Secr3tPW dbname=db", "Secr3tPW", "password = xxxxx dbname=db"},
	{"host=127.0.0.1 port=1 password= Secr3tPW", "Secr3tPW", "password= xxxxx"},
	{"host=127.0.0.1 port=1 password='Secr3t PW' dbname=db", "Secr3t PW", "password=xxxxx dbname=db"},
	{`host=127.0.0.1 port=1 password='Secr\'3t PW' dbname=db`, `Secr'3t PW`, "password=xxxxx dbname=db"},
	{`host=127.0.0.1 port=1 password=Secr\ 3tPW dbname=db`, `Secr 3tPW`, "password=xxxxx dbname=db"},
	{"host=127.0.0.1 port=1 password='Secr3t PW", "Secr3t PW", "password=xxxxx"},
	{"host=127.0.0.1 port=1 PASSWORD=Secr3tPW", "Secr3tPW", "PASSWORD=xxxxx"},
	{"host=127.0.0.1 port=x password=Secr3tPW", "Secr3tPW", "port=x password=xxxxx"},
	{"host=127.0.0.1 port=1 sslpassword=Secr3tPW", "Secr3tPW", "sslpassword=xxxxx"},
	{"u:Secr3tPW@127.0.0.1:1/db", "Secr3tPW", "u:xxxxx@127.0.0.1:1/db"},
}

func TestConnString(t *testing.T) {
	for _, c := range cases {
		got := redact.ConnString(c.conn)
		if strings.Contains(got, c.pw) {
			t.Errorf("ConnString(%q) = %q: shows the password", c.conn, got)
		}
		if !strings.Contains(got, c.keep) {
			t.Errorf("ConnString(%q) = %q, want it to keep %q", c.conn, got, c.keep)
		}
	}
}

// TestScrubPgxErrors: the errors pgx builds from each connection string
// (parsing, connecting to a closed port) show no password once scrubbed.
func TestScrubPgxErrors(t *testing.T) {
	for _, c := range cases {
		secrets := redact.Secrets(c.conn)
		if !containsSecret(secrets, c.pw) {
			t.Errorf("Secrets(%q) = %q: misses %q", c.conn, secrets, c.pw)
		}
		cfg, err := pgxpool.ParseConfig(c.conn)
		if err == nil {
			cfg.ConnConfig.ConnectTimeout = 2 * time.Second
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			var conn *pgconn.PgConn
			conn, err = pgconn.ConnectConfig(ctx, &cfg.ConnConfig.Config)
			cancel()
			if err == nil {
				conn.Close(context.Background())
				t.Fatalf("%q: connected to a closed port", c.conn)
			}
		}
		if got := redact.Scrub(err.Error(), secrets); strings.Contains(got, c.pw) {
			t.Errorf("%q: the scrubbed pgx error shows the password: %s", c.conn, got)
		}
		if got := redact.Scrub("connecting to "+c.conn+": "+err.Error(), secrets); strings.Contains(got, c.pw) {
			t.Errorf("%q: the scrubbed message shows the password: %s", c.conn, got)
		}
	}
}

func containsSecret(secrets []string, pw string) bool {
	for _, s := range secrets {
		if s == pw {
			return true
		}
	}
	return false
}

// TestScrubQuotedFragment: url.Parse's error quotes the bad escape of a
// password ("%zz"); it is masked.
func TestScrubQuotedFragment(t *testing.T) {
	conn := "postgres://u:PW%zzword@h/db"
	_, err := pgxpool.ParseConfig(conn)
	if err == nil {
		t.Fatal("parsed")
	}
	got := redact.Scrub(err.Error(), redact.Secrets(conn))
	if strings.Contains(got, "%zz") || strings.Contains(got, "PW") {
		t.Errorf("scrubbed: %s", got)
	}
}

// FuzzRedact: whatever the connection string, and whatever password is put
// in it in each of libpq's forms, neither ConnString nor a scrubbed pgx
// parse error shows the password.
func FuzzRedact(f *testing.F) {
	for _, c := range cases {
		f.Add(c.pw, uint8(0))
	}
	f.Add("p@ss:w/rd?x=1&y", uint8(3))
	f.Add(`a'b\c d`, uint8(7))
	f.Add("%zz%41", uint8(1))
	f.Fuzz(func(t *testing.T, pw string, form uint8) {
		if len(strings.TrimSpace(pw)) < 4 || strings.ContainsAny(pw, "\x00") {
			t.Skip()
		}
		var conn string
		quoted := "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pw) + "'"
		switch form % 8 {
		case 0:
			conn = "postgres://u:" + pw + "@127.0.0.1:1/db"
		case 1:
			conn = "postgres://u:" + pw + "@[::1:5432/db"
		case 2:
			conn = "postgres://u@127.0.0.1:1/db?sslmode=disable&password=" + url.QueryEscape(pw)
		case 3:
			conn = "postgresql://u@h:1/db?password=" + url.QueryEscape(pw) + "&application_name=x"
		case 4:
			conn = "host=127.0.0.1 port=1 password = " + quoted + " dbname=db"
		case 5:
			conn = "host=127.0.0.1 password=" + quoted
		case 6:
			conn = "user=u password=" + strings.NewReplacer(`\`, `\\`, " ", `\ `, "\t", "\\\t", "\n", "\\\n", "\r", "\\\r", "\v", "\\\v", "\f", "\\\f").Replace(pw) + " host=h"
		case 7:
			conn = "host=h password=" + quoted[:len(quoted)-1] // unterminated
		}
		secrets := redact.Secrets(conn)
		if got := redact.ConnString(conn); strings.Contains(got, pw) || strings.Contains(got, url.QueryEscape(pw)) {
			t.Fatalf("ConnString(%q) = %q", conn, got)
		}
		if _, err := pgxpool.ParseConfig(conn); err != nil {
			if got := redact.Scrub(err.Error(), secrets); strings.Contains(got, pw) {
				t.Fatalf("conn %q: pgx error %q scrubbed to %q", conn, err, got)
			}
		}
		if got := redact.Scrub("using "+conn+" failed", secrets); strings.Contains(got, pw) {
			t.Fatalf("conn %q: message scrubbed to %q", conn, got)
		}
	})
}
