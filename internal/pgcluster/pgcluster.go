// Package pgcluster starts throwaway PostgreSQL clusters from the installed
// server binaries, for tests that must restart, stop, dump into or fail
// over a server, which the shared one cannot be: a cluster alone (New), or
// a primary and a streaming standby of it (NewReplication).
//
// Test support only: nothing in ffriver calls it.
package pgcluster

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Cluster is a throwaway PostgreSQL cluster that one test owns: initdb'd
// into a temporary folder, listening on a free port of 127.0.0.1 and on a
// unix socket in that folder, stopped and removed when the test ends. Unlike
// the shared server, the test may restart or stop it.
type Cluster struct {
	t testing.TB
	// Bin is the folder of initdb, pg_ctl, postgres (and pg_dump, psql,
	// pg_basebackup beside them).
	Bin string
	// Dir is the cluster's folder: data/, postgres.log, the socket.
	Dir string
	// Port is the TCP port of 127.0.0.1 the server listens on.
	Port int
	// cred runs the server programs as an unprivileged user when the test
	// runs as root (initdb and postgres refuse root); nil otherwise.
	cred *syscall.Credential
	// Host is what clients connect to: the socket folder, or 127.0.0.1 when
	// the folder's path is too long for a unix socket.
	Host string
}

// pgBinDir returns the newest installed PostgreSQL server binaries' folder,
// or "" when none is installed. It looks where scripts/devdb.sh looks.
func pgBinDir() string {
	var dirs []string
	for _, pat := range []string{"/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin", "/usr/local/pgsql/bin", "/opt/homebrew/opt/postgresql*/bin"} {
		m, _ := filepath.Glob(pat)
		dirs = append(dirs, m...)
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			dirs = append(dirs, filepath.Dir(r))
		}
	}
	type cand struct {
		dir   string
		major int
	}
	var found []cand
	for _, d := range dirs {
		ok := true
		for _, prog := range []string{"initdb", "pg_ctl", "postgres"} {
			if fi, err := os.Stat(filepath.Join(d, prog)); err != nil || fi.Mode()&0o111 == 0 {
				ok = false
			}
		}
		if !ok {
			continue
		}
		out, err := exec.Command(filepath.Join(d, "postgres"), "--version").Output()
		if err != nil {
			continue
		}
		// "postgres (PostgreSQL) 15.20 (Debian 15.20-0+deb12u1)"
		v := string(out)
		if i := strings.Index(v, ") "); i >= 0 {
			v = v[i+2:]
		}
		var major int
		if f := strings.FieldsFunc(v, func(r rune) bool { return r < '0' || r > '9' }); len(f) > 0 {
			major, _ = strconv.Atoi(f[0])
		}
		found = append(found, cand{d, major})
	}
	if len(found) == 0 {
		return ""
	}
	slices.SortStableFunc(found, func(a, b cand) int { return cmp.Compare(b.major, a.major) })
	return found[0].dir
}

// serverUser returns the credential of the unprivileged user a root test
// runs the server as: "postgres", else "ffriver-pg" (the user
// scripts/devdb.sh creates).
func serverUser() (*syscall.Credential, string, error) {
	for _, name := range []string{"postgres", "ffriver-pg"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, name, nil
	}
	return nil, "", fmt.Errorf("running as root, and neither a postgres nor an ffriver-pg user exists to run the server " +
		"(scripts/devdb.sh creates ffriver-pg; or run the tests as an ordinary user)")
}

// FreePort returns a TCP port of 127.0.0.1 that nothing listens on now.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// SkipOrFail skips the test, or fails it with CI=true, where everything the
// suite needs must be installed.
func SkipOrFail(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (CI=true: failing instead of skipping)")
	}
	t.Skip(msg)
}

// New initialises and starts a throwaway cluster. Without installed
// PostgreSQL server binaries the test is skipped (failed with CI=true).
func New(ctx context.Context, t testing.TB) *Cluster {
	t.Helper()
	return NewWith(ctx, t, "")
}

// NewWith is New with extra lines for postgresql.conf after the throwaway
// cluster's own (max_connections = 200, say: the default is 50).
func NewWith(ctx context.Context, t testing.TB, extra string) *Cluster {
	t.Helper()
	c := NewDir(t)
	if out, err := c.Run(ctx, "initdb", "-D", c.Data(), "-U", "postgres", "-A", "trust", "-E", "UTF8",
		"--locale=C", "--no-sync"); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	c.Configure(extra)
	c.Start(ctx)
	return c
}

// NewDir returns a cluster whose folder exists, owned by the
// server's user, with a free port and no data yet, removed (its server
// stopped) when the test ends. Without installed PostgreSQL server binaries
// the test is skipped (failed with CI=true).
func NewDir(t testing.TB) *Cluster {
	t.Helper()
	bin := pgBinDir()
	if bin == "" {
		SkipOrFail(t, "no PostgreSQL server binaries (initdb, pg_ctl, postgres) found in /usr/lib/postgresql/*/bin, "+
			"/usr/pgsql-*/bin, /usr/local/pgsql/bin or on PATH; install PostgreSQL (Debian: apt-get install postgresql) to run this test")
	}
	c := &Cluster{t: t, Bin: bin}
	var owner string
	if os.Geteuid() == 0 {
		var err error
		if c.cred, owner, err = serverUser(); err != nil {
			SkipOrFail(t, err.Error())
		}
	}
	// Not t.TempDir(): its parents are private to this user, and the server
	// may run as another. A short path keeps the socket's under 107 bytes.
	dir, err := os.MkdirTemp("", "ffpg-")
	if err != nil {
		t.Fatal(err)
	}
	c.Dir = dir
	t.Cleanup(c.destroy)
	if c.cred != nil {
		if err := os.Chown(dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			t.Fatalf("handing %s to %s: %v", dir, owner, err)
		}
	}
	c.Port = FreePort(t)
	c.Host = c.Dir
	if len(c.Dir)+len("/.s.PGSQL.")+5 > 107 {
		c.Host = "127.0.0.1"
	}
	return c
}

// Configure appends the throwaway cluster's settings, then extra, to its
// postgresql.conf (later lines win).
func (c *Cluster) Configure(extra string) {
	c.t.Helper()
	if err := c.configure(extra); err != nil {
		c.t.Fatal(err)
	}
}

func (c *Cluster) configure(extra string) error {
	sockets := c.Dir
	if c.Host != c.Dir {
		sockets = ""
	}
	conf := fmt.Sprintf(`
# --- throwaway cluster of an ffriver integration test ---
listen_addresses = '127.0.0.1'
port = %d
unix_socket_directories = '%s'
max_connections = 50
shared_buffers = 32MB
fsync = off
full_page_writes = off
`, c.Port, sockets) + extra
	f, err := os.OpenFile(filepath.Join(c.Data(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(conf); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Start starts the cluster's server and waits until it accepts
// connections.
func (c *Cluster) Start(ctx context.Context) {
	c.t.Helper()
	if err := c.start(ctx); err != nil {
		c.t.Fatal(err)
	}
}

func (c *Cluster) start(ctx context.Context) error {
	if out, err := c.Run(ctx, "pg_ctl", "-D", c.Data(), "-l", c.LogFile(), "-w", "-t", "30", "start"); err != nil {
		return fmt.Errorf("pg_ctl start: %w\n%s\nserver log:\n%s", err, out, c.Log())
	}
	c.t.Logf("throwaway PostgreSQL cluster (%s) in %s, port %d", c.Bin, c.Dir, c.Port)
	return nil
}

func (c *Cluster) Data() string    { return filepath.Join(c.Dir, "data") }
func (c *Cluster) LogFile() string { return filepath.Join(c.Dir, "postgres.log") }

// Log returns the server log.
func (c *Cluster) Log() string {
	b, _ := os.ReadFile(c.LogFile())
	return string(b)
}

// Run runs one of the server programs as the cluster's user, from its
// folder, and returns its combined output.
func (c *Cluster) Run(ctx context.Context, prog string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.Bin, prog), args...)
	cmd.Dir = c.Dir
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	// The server pg_ctl starts writes to its log file, not to our pipes;
	// WaitDelay bounds the wait should it hold them anyway.
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	return out.Bytes(), err
}

// Restart restarts the server the way an operator does: fast shutdown
// (every session is terminated, open transactions roll back), then start.
func (c *Cluster) Restart(ctx context.Context) error {
	if out, err := c.Run(ctx, "pg_ctl", "-D", c.Data(), "-l", c.LogFile(), "-m", "fast", "-w", "-t", "30", "restart"); err != nil {
		return fmt.Errorf("pg_ctl restart: %w\n%s", err, out)
	}
	return nil
}

// ConnString returns a connection string to database db as user postgres.
func (c *Cluster) ConnString(db string) string {
	return fmt.Sprintf("host=%s port=%d user=postgres dbname=%s sslmode=disable", c.Host, c.Port, db)
}

// Pool returns a pool on database postgres whose search_path is schema,
// closed when the test ends.
func (c *Cluster) Pool(ctx context.Context, schema string, maxConns int32) *pgxpool.Pool {
	c.t.Helper()
	cfg, err := pgxpool.ParseConfig(c.ConnString("postgres"))
	if err != nil {
		c.t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = p.Ping(ctx)
	}
	if err != nil {
		c.t.Fatalf("connecting to the throwaway cluster: %v\nserver log:\n%s", err, c.Log())
	}
	c.t.Cleanup(p.Close)
	return p
}

// destroy stops the server (if it runs) and removes the cluster's files.
func (c *Cluster) destroy() {
	if _, err := os.Stat(filepath.Join(c.Data(), "postmaster.pid")); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := c.Run(ctx, "pg_ctl", "-D", c.Data(), "-m", "immediate", "-w", "-t", "20", "stop")
		cancel()
		if err != nil {
			c.t.Errorf("stopping the throwaway cluster in %s: %v\n%s", c.Dir, err, out)
			return // leave the files for a look rather than pull them from under a running server
		}
	}
	if err := os.RemoveAll(c.Dir); err != nil {
		c.t.Errorf("removing %s: %v", c.Dir, err)
	}
}
