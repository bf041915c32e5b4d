package integration

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

// cluster is a throwaway PostgreSQL cluster that one test owns: initdb'd
// into a temporary folder, listening on a free port of 127.0.0.1 and on a
// unix socket in that folder, stopped and removed when the test ends. Unlike
// the shared server, the test may restart or stop it.
type cluster struct {
	t    *testing.T
	bin  string // folder of initdb, pg_ctl, postgres
	dir  string // the cluster's folder: data/, postgres.log, the socket
	port int
	// cred runs the server programs as an unprivileged user when the test
	// runs as root (initdb and postgres refuse root); nil otherwise.
	cred *syscall.Credential
	// host is what clients connect to: the socket folder, or 127.0.0.1 when
	// the folder's path is too long for a unix socket.
	host string
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

// freePort returns a TCP port of 127.0.0.1 that nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// skipOrFail skips the test, or fails it with CI=true, where everything the
// suite needs must be installed.
func skipOrFail(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (CI=true: failing instead of skipping)")
	}
	t.Skip(msg)
}

// newCluster initialises and starts a throwaway cluster. Without installed
// PostgreSQL server binaries the test is skipped (failed with CI=true).
func newCluster(ctx context.Context, t *testing.T) *cluster {
	t.Helper()
	c := newClusterDir(t)
	if out, err := c.run(ctx, "initdb", "-D", c.data(), "-U", "postgres", "-A", "trust", "-E", "UTF8",
		"--locale=C", "--no-sync"); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	c.configure("")
	c.start(ctx)
	return c
}

// newClusterDir returns a cluster whose folder exists, owned by the
// server's user, with a free port and no data yet, removed (its server
// stopped) when the test ends. Without installed PostgreSQL server binaries
// the test is skipped (failed with CI=true).
func newClusterDir(t *testing.T) *cluster {
	t.Helper()
	bin := pgBinDir()
	if bin == "" {
		skipOrFail(t, "no PostgreSQL server binaries (initdb, pg_ctl, postgres) found in /usr/lib/postgresql/*/bin, "+
			"/usr/pgsql-*/bin, /usr/local/pgsql/bin or on PATH; install PostgreSQL (Debian: apt-get install postgresql) to run this test")
	}
	c := &cluster{t: t, bin: bin}
	var owner string
	if os.Geteuid() == 0 {
		var err error
		if c.cred, owner, err = serverUser(); err != nil {
			skipOrFail(t, err.Error())
		}
	}
	// Not t.TempDir(): its parents are private to this user, and the server
	// may run as another. A short path keeps the socket's under 107 bytes.
	dir, err := os.MkdirTemp("", "ffpg-")
	if err != nil {
		t.Fatal(err)
	}
	c.dir = dir
	t.Cleanup(c.destroy)
	if c.cred != nil {
		if err := os.Chown(dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			t.Fatalf("handing %s to %s: %v", dir, owner, err)
		}
	}
	c.port = freePort(t)
	c.host = c.dir
	if len(c.dir)+len("/.s.PGSQL.")+5 > 107 {
		c.host = "127.0.0.1"
	}
	return c
}

// configure appends the throwaway cluster's settings, then extra, to its
// postgresql.conf (later lines win).
func (c *cluster) configure(extra string) {
	c.t.Helper()
	sockets := c.dir
	if c.host != c.dir {
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
`, c.port, sockets) + extra
	f, err := os.OpenFile(filepath.Join(c.data(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := f.WriteString(conf); err != nil {
		c.t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		c.t.Fatal(err)
	}
}

// start starts the cluster's server and waits until it accepts
// connections.
func (c *cluster) start(ctx context.Context) {
	c.t.Helper()
	if out, err := c.run(ctx, "pg_ctl", "-D", c.data(), "-l", c.logFile(), "-w", "-t", "30", "start"); err != nil {
		c.t.Fatalf("pg_ctl start: %v\n%s\nserver log:\n%s", err, out, c.log())
	}
	c.t.Logf("throwaway PostgreSQL cluster (%s) in %s, port %d", c.bin, c.dir, c.port)
}

func (c *cluster) data() string    { return filepath.Join(c.dir, "data") }
func (c *cluster) logFile() string { return filepath.Join(c.dir, "postgres.log") }

// log returns the server log.
func (c *cluster) log() string {
	b, _ := os.ReadFile(c.logFile())
	return string(b)
}

// run runs one of the server programs as the cluster's user, from its
// folder, and returns its combined output.
func (c *cluster) run(ctx context.Context, prog string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, prog), args...)
	cmd.Dir = c.dir
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

// restart restarts the server the way an operator does: fast shutdown
// (every session is terminated, open transactions roll back), then start.
func (c *cluster) restart(ctx context.Context) error {
	if out, err := c.run(ctx, "pg_ctl", "-D", c.data(), "-l", c.logFile(), "-m", "fast", "-w", "-t", "30", "restart"); err != nil {
		return fmt.Errorf("pg_ctl restart: %w\n%s", err, out)
	}
	return nil
}

// connString returns a connection string to database db as user postgres.
func (c *cluster) connString(db string) string {
	return fmt.Sprintf("host=%s port=%d user=postgres dbname=%s sslmode=disable", c.host, c.port, db)
}

// pool returns a pool on database postgres whose search_path is schema,
// closed when the test ends.
func (c *cluster) pool(ctx context.Context, schema string, maxConns int32) *pgxpool.Pool {
	c.t.Helper()
	cfg, err := pgxpool.ParseConfig(c.connString("postgres"))
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
		c.t.Fatalf("connecting to the throwaway cluster: %v\nserver log:\n%s", err, c.log())
	}
	c.t.Cleanup(p.Close)
	return p
}

// destroy stops the server (if it runs) and removes the cluster's files.
func (c *cluster) destroy() {
	if _, err := os.Stat(filepath.Join(c.data(), "postmaster.pid")); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := c.run(ctx, "pg_ctl", "-D", c.data(), "-m", "immediate", "-w", "-t", "20", "stop")
		cancel()
		if err != nil {
			c.t.Errorf("stopping the throwaway cluster in %s: %v\n%s", c.dir, err, out)
			return // leave the files for a look rather than pull them from under a running server
		}
	}
	if err := os.RemoveAll(c.dir); err != nil {
		c.t.Errorf("removing %s: %v", c.dir, err)
	}
}
