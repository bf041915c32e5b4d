#!/usr/bin/env bash
# devdb.sh — find or start a PostgreSQL server for ffriver's tests, demo and
# benchmarks, and print its URL.
#
#   scripts/devdb.sh          print one line on stdout: a postgres URL that answers
#   scripts/devdb.sh stop     stop the throwaway cluster this script started
#   scripts/devdb.sh status   say on stderr whether the throwaway cluster runs
#
# Every message goes to stderr; stdout carries only the URL, so callers write
#   export DATABASE_URL="$(scripts/devdb.sh)"
#
# Where the URL comes from, in order:
#   a. $DATABASE_URL, when it is set: it must answer, else this fails (a URL
#      the user set is never replaced by another database);
#   b. a server on 127.0.0.1:5432 as user postgres, database "test", else
#      database "postgres" (skipped with FF_DEVDB_SKIP_LOCAL=1);
#   c. a throwaway cluster of the installed PostgreSQL binaries in .devdb/ of
#      this repository (git-ignored), on a free port other than 5432, listening
#      on 127.0.0.1 and on a unix socket in .devdb/; reused while it runs;
#   d. as root with apt-get: Debian's postgresql package is installed, then c;
#   e. otherwise it exits 1 saying what to install.
#
# The throwaway cluster trades durability for speed (fsync=off): it is for
# tests only. initdb and postgres refuse to run as root, so as root the cluster
# belongs to the "postgres" system user, or to a system user "ffriver-pg"
# created for it.
#
# Uses bash, the PostgreSQL server binaries, and psql or pg_isready to probe
# when they are installed. Nothing here touches a server it did not start.
set -euo pipefail
shopt -s inherit_errexit

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEVDB="$ROOT/.devdb"
PROBE_TIMEOUT="${FF_DEVDB_PROBE_TIMEOUT:-5}"
FALLBACK_USER="ffriver-pg"

say() { printf 'devdb: %s\n' "$*" >&2; }
die() {
	say "$*"
	exit 1
}

# redact hides a password in a URL: postgres://u:secret@h/db -> postgres://u:***@h/db.
redact() { printf '%s' "$1" | sed -E 's#^([a-zA-Z]+://[^:/@]*):[^@]*@#\1:***@#'; }

# ---------------------------------------------------------------- binaries

# bindirs prints directories holding PostgreSQL server binaries, newest
# major version first.
bindirs() {
	local d dirs=()
	for d in /usr/lib/postgresql/*/bin /usr/pgsql-*/bin /usr/local/pgsql/bin /opt/homebrew/opt/postgresql*/bin; do
		[[ -d $d ]] && dirs+=("$d")
	done
	if command -v pg_config >/dev/null 2>&1; then
		d="$(pg_config --bindir 2>/dev/null || true)"
		[[ -n $d && -d $d ]] && dirs+=("$d")
	fi
	if command -v initdb >/dev/null 2>&1; then
		d="$(dirname "$(readlink -f "$(command -v initdb)")")"
		dirs+=("$d")
	fi
	local seen=" " out=()
	for d in "${dirs[@]+"${dirs[@]}"}"; do
		d="$(readlink -f "$d")"
		[[ $seen == *" $d "* ]] && continue
		seen+="$d "
		if [[ -x $d/initdb && -x $d/postgres && -x $d/pg_ctl ]]; then
			out+=("$(pg_major "$d") $d")
		fi
	done
	((${#out[@]})) || return 0
	printf '%s\n' "${out[@]}" | sort -t' ' -k1,1nr | cut -d' ' -f2-
}

# pg_major prints the major version of the server binaries in $1 ("15").
pg_major() {
	local v
	v="$("$1/postgres" --version 2>/dev/null || true)" # "postgres (PostgreSQL) 15.19 (Debian ...)"
	v="${v#*) }"
	v="${v%%[!0-9]*}"
	printf '%s' "${v:-0}"
}

# tool prints the path of a client program (psql, pg_isready): from PATH, else
# from a server bindir.
tool() {
	local d
	if command -v "$1" >/dev/null 2>&1; then
		command -v "$1"
		return 0
	fi
	while read -r d; do
		[[ -n $d && -x $d/$1 ]] && {
			printf '%s\n' "$d/$1"
			return 0
		}
	done < <(bindirs)
	return 1
}

# probe URL: does a server answer there? psql checks the database exists too;
# pg_isready only that the server accepts connections. Status 2: cannot probe.
probe() {
	local url="$1" t
	if t="$(tool psql)"; then
		PGCONNECT_TIMEOUT="$PROBE_TIMEOUT" "$t" -X -q -A -t -w -d "$url" -c 'SELECT 1' >/dev/null 2>&1 || return 1
		return 0
	fi
	if t="$(tool pg_isready)"; then
		"$t" -q -t "$PROBE_TIMEOUT" -d "$url" >/dev/null 2>&1 || return 1
		return 0
	fi
	return 2
}

# ------------------------------------------------------------ running as

# pg_user prints the unprivileged user the cluster runs as when we are root.
pg_user() {
	if getent passwd postgres >/dev/null 2>&1; then
		printf 'postgres'
		return
	fi
	if ! getent passwd "$FALLBACK_USER" >/dev/null 2>&1; then
		command -v useradd >/dev/null 2>&1 || die "running as root without a postgres user and without useradd; run this script as an ordinary user."
		say "creating system user $FALLBACK_USER to own the throwaway cluster (initdb refuses to run as root)"
		useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$FALLBACK_USER" >&2
	fi
	printf '%s' "$FALLBACK_USER"
}

# close_fds closes every descriptor above stderr in this (sub)shell, so a
# server started from here holds neither our lock (fd 9) nor a caller's pipe
# (which would keep `$(scripts/devdb.sh)` or `| tee` waiting for EOF).
close_fds() {
	local fd fds=()
	if [[ -d /proc/$BASHPID/fd ]]; then
		for fd in /proc/"$BASHPID"/fd/*; do
			fds+=("${fd##*/}")
		done
	else
		fds=(9)
	fi
	for fd in "${fds[@]}"; do
		if [[ $fd =~ ^[0-9]+$ ]] && ((fd > 2)); then
			eval "exec $fd>&-" 2>/dev/null || true
		fi
	done
}

# as USER DIR CMD...: run CMD as USER (directly when USER is empty), from DIR,
# a directory USER can enter.
as() {
	local user="$1" dir="$2"
	shift 2
	if [[ -z $user ]]; then
		(cd "$dir" && close_fds && exec "$@")
	elif command -v runuser >/dev/null 2>&1; then
		(cd "$dir" && close_fds && exec runuser -u "$user" -- "$@")
	else
		local q
		q="$(printf '%q ' "$@")"
		(cd "$dir" && close_fds && exec su -s /bin/sh "$user" -c "$q")
	fi
}

# ------------------------------------------------------------- the cluster

# home prints where the cluster lives: .devdb/, or the folder .devdb/location
# names when the cluster user could not reach .devdb/ (a repo under /root).
home() {
	if [[ -f $DEVDB/location ]]; then
		cat "$DEVDB/location"
	else
		printf '%s' "$DEVDB"
	fi
}

# running_port HOME: the port of a live cluster in HOME/data, else fails.
running_port() {
	local h="$1" pid port
	[[ -f $h/data/postmaster.pid ]] || return 1
	pid="$(sed -n 1p "$h/data/postmaster.pid" 2>/dev/null || true)"
	port="$(sed -n 4p "$h/data/postmaster.pid" 2>/dev/null || true)"
	[[ $pid =~ ^[0-9]+$ && $port =~ ^[0-9]+$ ]] || return 1
	kill -0 "$pid" 2>/dev/null || [[ -d /proc/$pid ]] || return 1
	printf '%s' "$port"
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# free_port prints a port near one derived from the repo path (so two clones
# get different ones), below Linux's ephemeral range, never 5432.
free_port() {
	local base port i
	base=$((25432 + $(printf '%s' "$ROOT" | cksum | cut -d' ' -f1) % 2000))
	for ((i = 0; i < 200; i++)); do
		port=$((base + i))
		[[ $port == 5432 ]] && continue
		port_busy "$port" || {
			printf '%s' "$port"
			return 0
		}
	done
	return 1
}

cluster_url() { printf 'postgres://postgres@127.0.0.1:%s/test?sslmode=disable' "$1"; }

# init_cluster BINDIR HOME USER: initdb, settings, database "test".
init_cluster() {
	local bin="$1" h="$2" user="$3" sockdir
	say "initialising a throwaway cluster in $h/data (PostgreSQL $(pg_major "$bin"))"
	rm -rf "$h/data"
	as "$user" "$h" "$bin/initdb" -D "$h/data" -U postgres -A trust -E UTF8 --locale=C --no-sync >"$h/initdb.log" 2>&1 ||
		{
			cat "$h/initdb.log" >&2
			die "initdb failed (log above, also in $h/initdb.log)"
		}
	sockdir="$h"
	# A unix socket path must fit in 107 bytes: /dir/.s.PGSQL.NNNNN.
	if ((${#sockdir} + 15 > 107)); then
		say "the path $sockdir is too long for a unix socket; the cluster listens on 127.0.0.1 only"
		sockdir=""
	fi
	cat >>"$h/data/postgresql.conf" <<EOF

# --- ffriver devdb: a throwaway cluster for tests (scripts/devdb.sh) ---
listen_addresses = '127.0.0.1'
unix_socket_directories = '$sockdir'
max_connections = 200
fsync = off
full_page_writes = off
EOF
	# Single-user mode needs no client program and no running server.
	printf 'CREATE DATABASE test;\n' |
		as "$user" "$h" "$bin/postgres" --single -D "$h/data" -F -c exit_on_error=true postgres >>"$h/initdb.log" 2>&1 ||
		{
			cat "$h/initdb.log" >&2
			die "creating database test failed (log above)"
		}
	printf '%s\n' "$bin" >"$h/bindir"
}

# start_cluster BINDIR HOME USER: start on a free port; prints the port.
start_cluster() {
	local bin="$1" h="$2" user="$3" port try
	for ((try = 0; try < 5; try++)); do
		port="$(free_port)" || die "no free port found for the throwaway cluster"
		: >"$h/postgres.log"
		[[ -z $user ]] || chown "$user:" "$h/postgres.log"
		if as "$user" "$h" "$bin/pg_ctl" -D "$h/data" -l "$h/postgres.log" -w -t 60 -o "-p $port" start >&2; then
			printf '%s\n' "$port" >"$h/port"
			printf '%s' "$port"
			return 0
		fi
		if grep -qiE 'could not bind|address already in use' "$h/postgres.log"; then
			say "port $port was taken; trying another"
			continue
		fi
		cat "$h/postgres.log" >&2
		die "the throwaway cluster did not start (log above, also in $h/postgres.log)"
	done
	die "the throwaway cluster did not start: every port tried was taken"
}

# throwaway prints the URL of the throwaway cluster, starting it when needed.
# The caller has checked that PostgreSQL binaries are installed.
throwaway() {
	local dirs bin h user="" port url want rc
	dirs="$(bindirs)"

	mkdir -p "$DEVDB"
	# Serialise concurrent callers (two `make test` at once).
	if command -v flock >/dev/null 2>&1; then
		exec 9>>"$DEVDB/lock"
		flock -w 180 9 || die "timed out waiting for another devdb.sh holding $DEVDB/lock"
	fi

	h="$(home)"
	if port="$(running_port "$h")"; then
		url="$(cluster_url "$port")"
		rc=0
		probe "$url" || rc=$?
		if ((rc != 1)); then
			say "reusing the throwaway cluster in $h (port $port; stop it with scripts/devdb.sh stop)"
			printf '%s\n' "$url"
			return 0
		fi
		say "the cluster in $h claims port $port but does not answer; restarting it"
		stop >/dev/null || true
	fi

	if ((EUID == 0)); then
		# The owner of existing data, else the postgres system user.
		if [[ -d $h/data ]]; then
			user="$(stat -c %U "$h/data")"
		else
			user="$(pg_user)"
		fi
		chown -R "$user:" "$DEVDB"
		if ! as "$user" / test -w "$DEVDB"; then
			# The user cannot reach the repository (for example under /root):
			# keep the cluster in a folder of its own and remember where.
			h="${TMPDIR:-/tmp}/ffriver-devdb-$(printf '%s' "$ROOT" | cksum | cut -d' ' -f1)"
			say "$user cannot reach $DEVDB; keeping the cluster in $h"
			mkdir -p "$h"
			chmod 0755 "$h"
			chown -R "$user:" "$h"
			printf '%s\n' "$h" >"$DEVDB/location"
		fi
	fi

	# Prefer the binaries of the version the existing data was made with.
	bin="$(head -n1 <<<"$dirs")"
	if [[ -f $h/data/PG_VERSION ]]; then
		want="$(cat "$h/data/PG_VERSION")"
		local d
		while read -r d; do
			if [[ $(pg_major "$d") == "$want" ]]; then
				bin="$d"
				break
			fi
		done <<<"$dirs"
		if [[ $(pg_major "$bin") != "$want" ]]; then
			say "the cluster in $h was made by PostgreSQL $want, which is no longer installed; making a new one"
			rm -rf "$h/data"
		fi
	fi
	if [[ ! -f $h/data/PG_VERSION ]]; then
		init_cluster "$bin" "$h" "$user"
	else
		[[ -z $user ]] || chown -R "$user:" "$h"
	fi
	port="$(start_cluster "$bin" "$h" "$user")"
	url="$(cluster_url "$port")"
	rc=0
	probe "$url" || rc=$?
	if ((rc == 1)); then
		die "the throwaway cluster started but $url does not answer (log: $h/postgres.log)"
	fi
	say "started a throwaway cluster: PostgreSQL $(pg_major "$bin") in $h, port $port (stop it with scripts/devdb.sh stop)"
	printf '%s\n' "$url"
}

stop() {
	local h bin user="" port
	h="$(home)"
	if ! port="$(running_port "$h")"; then
		say "no throwaway cluster is running in $h"
		return 0
	fi
	bin="$(cat "$h/bindir" 2>/dev/null || true)"
	[[ -x $bin/pg_ctl ]] || bin="$(bindirs | head -n1)"
	[[ -n $bin ]] || die "cannot find pg_ctl to stop the cluster in $h"
	((EUID == 0)) && user="$(stat -c %U "$h/data")"
	as "$user" "$h" "$bin/pg_ctl" -D "$h/data" -m fast -w -t 60 stop >&2
	say "stopped the throwaway cluster in $h (port $port)"
}

status() {
	local h port
	h="$(home)"
	if port="$(running_port "$h")"; then
		say "the throwaway cluster in $h is running on port $port: $(cluster_url "$port")"
	else
		say "no throwaway cluster is running in $h"
		return 1
	fi
}

# ------------------------------------------------------------------- main

find_url() {
	local rc url db
	# a. $DATABASE_URL
	if [[ -n ${DATABASE_URL:-} ]]; then
		rc=0
		probe "$DATABASE_URL" || rc=$?
		case $rc in
		0)
			say "using \$DATABASE_URL ($(redact "$DATABASE_URL"))"
			printf '%s\n' "$DATABASE_URL"
			return 0
			;;
		1) die "\$DATABASE_URL ($(redact "$DATABASE_URL")) does not answer: start that server or fix the URL, or unset DATABASE_URL to let this script find or start one (a set URL is never replaced by another database)" ;;
		2)
			say "cannot probe \$DATABASE_URL (neither psql nor pg_isready is installed): using it as it is"
			printf '%s\n' "$DATABASE_URL"
			return 0
			;;
		esac
	fi
	# b. a server on 127.0.0.1:5432
	if [[ ${FF_DEVDB_SKIP_LOCAL:-} == 1 ]]; then
		say "FF_DEVDB_SKIP_LOCAL=1: not looking at 127.0.0.1:5432"
	else
		for db in test postgres; do
			url="postgres://postgres@127.0.0.1:5432/$db?sslmode=disable"
			if probe "$url"; then
				say "using the server on 127.0.0.1:5432 (user postgres, database $db)"
				printf '%s\n' "$url"
				return 0
			fi
		done
	fi
	# c. a throwaway cluster
	if [[ -n "$(bindirs)" ]]; then
		throwaway
		return 0
	fi
	# d. install Debian's PostgreSQL, then c
	if ((EUID == 0)) && command -v apt-get >/dev/null 2>&1; then
		say "no PostgreSQL binaries found; installing Debian's postgresql package"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update >&2 || die "apt-get update failed"
		apt-get install -y --no-install-recommends postgresql >&2 || die "apt-get install postgresql failed"
		if [[ -n ${DATABASE_URL:-} ]] && probe "$DATABASE_URL"; then
			say "using \$DATABASE_URL ($(redact "$DATABASE_URL"))"
			printf '%s\n' "$DATABASE_URL"
			return 0
		fi
		if [[ -n "$(bindirs)" ]]; then
			throwaway
			return 0
		fi
		die "installed postgresql but found no server binaries in /usr/lib/postgresql/*/bin"
	fi
	# e.
	die "no PostgreSQL found: install PostgreSQL (Debian/Ubuntu: apt-get install postgresql; macOS: brew install postgresql), or start a server on 127.0.0.1:5432, or set DATABASE_URL to one that answers."
}

case "${1:-url}" in
url | start) find_url ;;
stop) stop ;;
status) status ;;
-h | --help | help)
	sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
	;;
*)
	say "unknown command '$1'; use: scripts/devdb.sh [url|stop|status]"
	exit 2
	;;
esac
