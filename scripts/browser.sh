#!/usr/bin/env bash
# browser.sh — find or install a headless Chromium for ffriver's browser test,
# and print its path.
#
#   scripts/browser.sh          print one line on stdout: the path of a Chromium
#                               that starts (`--version` answers)
#   scripts/browser.sh check    the same, and also render a page headless
#
# Every message goes to stderr; stdout carries only the path, so callers write
#   export FF_CHROMIUM="$(scripts/browser.sh)"
#
# Where the browser comes from, in order:
#   a. $FF_CHROMIUM, when it is set and runs;
#   b. chromium, chromium-browser, google-chrome-stable, google-chrome or
#      chrome on PATH, then /usr/bin/chromium;
#   c. Debian's chromium package, installed with apt-get (as root, else
#      through `sudo -n` when that needs no password); skipped with
#      FF_BROWSER_INSTALL=0;
#   d. otherwise it exits 1 saying what to install.
#
# `make test` calls it and exports FF_CHROMIUM to the tests. When it exits 1,
# make test fails under CI=true (a browser test is never skipped in CI) and
# otherwise runs the suite with the browser test skipped, saying why.
#
# On a closed network Chromium must start with --headless --no-sandbox
# --disable-gpu --disable-quic --no-first-run --disable-background-networking
# --disable-component-update --disable-sync and an empty --user-data-dir; the
# check below and the browser test (cmd/internal/ffview) use those flags.
set -euo pipefail
shopt -s inherit_errexit

CHECK_TIMEOUT="${FF_BROWSER_CHECK_TIMEOUT:-60}"

say() { printf 'browser: %s\n' "$*" >&2; }
die() {
	say "$*"
	exit 1
}

# works PATH: does the program start and say it is a Chromium?
works() {
	local v
	[[ -x $1 ]] || return 1
	v="$(timeout "$CHECK_TIMEOUT" "$1" --version 2>/dev/null)" || return 1
	[[ $v == *Chrom* ]] || return 1
	say "using $1 ($v)"
}

# renders PATH: does it render a page headless, with the flags the test uses?
renders() {
	local dir out rc=0
	dir="$(mktemp -d "${TMPDIR:-/tmp}/ffriver-browser-check.XXXXXX")"
	out="$(timeout "$CHECK_TIMEOUT" "$1" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
		--disable-background-networking --disable-component-update --disable-sync \
		--user-data-dir="$dir/profile" \
		--dump-dom 'data:text/html,<title>ffriver</title><p id=ok>rendered</p>' 2>"$dir/stderr")" || rc=$?
	if ((rc != 0)) || [[ $out != *'id="ok"'* ]]; then
		say "$1 did not render a page headless (exit $rc); its last messages:"
		tail -n 20 "$dir/stderr" >&2 || true
		rm -rf "$dir"
		return 1
	fi
	rm -rf "$dir"
	say "$1 renders a page headless"
}

find_browser() {
	local c p
	if [[ -n ${FF_CHROMIUM:-} ]]; then
		if works "$FF_CHROMIUM"; then
			printf '%s\n' "$FF_CHROMIUM"
			return 0
		fi
		say "\$FF_CHROMIUM ($FF_CHROMIUM) does not run; looking further"
	fi
	for c in chromium chromium-browser google-chrome-stable google-chrome chrome; do
		p="$(command -v "$c" 2>/dev/null || true)"
		if [[ -n $p ]] && works "$p"; then
			printf '%s\n' "$p"
			return 0
		fi
	done
	if works /usr/bin/chromium; then
		printf '%s\n' /usr/bin/chromium
		return 0
	fi
	return 1
}

install_browser() {
	local sudo=()
	if [[ ${FF_BROWSER_INSTALL:-1} == 0 ]]; then
		say "FF_BROWSER_INSTALL=0: not installing a browser"
		return 1
	fi
	command -v apt-get >/dev/null 2>&1 || {
		say "no apt-get here to install Chromium with"
		return 1
	}
	if ((EUID != 0)); then
		if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
			sudo=(sudo -n)
		else
			say "not root, and sudo needs a password: cannot install Chromium"
			return 1
		fi
	fi
	say "no Chromium found; installing Debian's chromium package (apt-get, a few minutes)"
	export DEBIAN_FRONTEND=noninteractive
	"${sudo[@]}" apt-get update >&2 || {
		say "apt-get update failed"
		return 1
	}
	"${sudo[@]}" apt-get install -y --no-install-recommends chromium >&2 || {
		say "apt-get install chromium failed"
		return 1
	}
}

main() {
	local p
	if ! p="$(find_browser)"; then
		install_browser || die "no headless Chromium: install Debian's chromium package (apt-get install chromium), or set FF_CHROMIUM to a Chromium or Chrome binary."
		p="$(find_browser)" || die "installed chromium but found no Chromium that runs (looked on PATH and at /usr/bin/chromium)"
	fi
	if [[ ${1:-} == check ]]; then
		renders "$p" || die "$p is installed but cannot render a page headless"
	fi
	printf '%s\n' "$p"
}

case "${1:-path}" in
path | check) main "${1:-path}" ;;
-h | --help | help)
	sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
	;;
*)
	say "unknown command '$1'; use: scripts/browser.sh [path|check]"
	exit 2
	;;
esac
