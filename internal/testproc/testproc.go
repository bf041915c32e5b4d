// Package testproc builds ffriver's commands for black-box tests and runs
// them as child processes: the integration suite and the lease-protocol
// history checker (integration/leasecheck) share it.
//
// The commands are built with the build tags of the running test binary
// (go test -tags …), so that a test and the binaries it starts are built
// alike, and they run with an environment from which every database setting
// was removed: only the flags a test passes reach them.
package testproc

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"time"
)

// Module is the library's module path; the commands are built from
// Module+"/cmd/<name>", in the binaries' own module (cmd/go.mod), which the
// repository's go.work puts beside the library's.
const Module = "github.com/ffriver/ffriver"

// RepoRoot returns the repository's root, the nearest directory above the
// working directory (a test runs in its package's directory) whose go.mod
// is the library's (cmd/ has a go.mod of its own), and false when there is
// none.
func RepoRoot() (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for d := dir; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && strings.Contains(string(b), "module "+Module+"\n") {
			return d, true
		}
		if filepath.Dir(d) == d {
			return "", false
		}
	}
}

// Env returns this process's environment without the database settings a
// binary would otherwise pick up: DATABASE_URL, FF_SCHEMA, FF_STARTUP_WAIT,
// FF_UI_*, FF_CLOCK_OFFSET and libpq's PG* variables.
func Env() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "DATABASE_URL" || k == "FF_SCHEMA" || k == "FF_STARTUP_WAIT" || k == "FF_CLOCK_OFFSET" || strings.HasPrefix(k, "PG") || strings.HasPrefix(k, "FF_UI") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// BuildTags returns the -tags the running binary was built with ("" when
// none, or when the binary carries no build information).
func BuildTags() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, s := range info.Settings {
		if s.Key == "-tags" {
			return s.Value
		}
	}
	return ""
}

// Build builds cmd/<name> for each name into dir with BuildTags, and
// returns the binaries' paths by name.
func Build(ctx context.Context, dir string, names ...string) (map[string]string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("the go command is not on PATH: %w", err)
	}
	out := map[string]string{}
	for _, name := range names {
		bin := filepath.Join(dir, name)
		args := []string{"build", "-o", bin}
		if tags := BuildTags(); tags != "" {
			args = append(args, "-tags", tags)
		}
		cmd := exec.CommandContext(ctx, goBin, append(args, Module+"/cmd/"+name)...)
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build ./cmd/%s: %w\n%s", name, err, b)
		}
		out[name] = bin
	}
	return out, nil
}

// Proc is a running command; its stdout and stderr are kept together.
type Proc struct {
	// Name says which process it is in messages.
	Name string
	cmd  *exec.Cmd
	out  Buffer
	done chan struct{}
	code int
}

// Start starts bin with args and Env.
func Start(name, bin string, args ...string) (*Proc, error) {
	return StartEnv(name, bin, nil, args...)
}

// StartEnv starts bin with args and Env plus env (KEY=value each).
func StartEnv(name, bin string, env []string, args ...string) (*Proc, error) {
	p := &Proc{Name: name, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(Env(), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	return p, nil
}

// Pid returns the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Signal sends sig to the process.
func (p *Proc) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Done is closed once the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Code returns the exit code once Done is closed (-1 for a signal).
func (p *Proc) Code() int {
	<-p.done
	return p.code
}

// Wait waits up to within for the process to exit and returns its exit
// code; ok is false when it is still running.
func (p *Proc) Wait(within time.Duration) (code int, ok bool) {
	select {
	case <-p.done:
		return p.code, true
	case <-time.After(within):
		return 0, false
	}
}

// Kill kills the process (SIGKILL) if it still runs and waits for it.
func (p *Proc) Kill() {
	if !p.Exited() {
		_ = p.cmd.Process.Kill()
	}
	<-p.done
}

// Output returns what the process printed so far.
func (p *Proc) Output() string { return p.out.String() }

// Buffer is a bytes.Buffer safe for a process writing while a test reads.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (s *Buffer) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(b)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
