# ffriver — make targets.
#
#   make test      find or start a Postgres (scripts/devdb.sh) and a headless Chromium
#                  (scripts/browser.sh), then go vet and the whole suite with -race
#   make browser-test  only the execution view's browser test (headless Chromium), verbose
#   make screenshots   the browser test, writing the execution view guide's screenshots to docs/screenshots/
#   make lint      gofmt, go vet, staticcheck (fetched through the Go module proxy by `go run`)
#   make demo      the live demo against the local database (ffctl demo)
#   make bench     the performance scenarios (ffctl bench)
#   make migrate   migrate the local database's schema ($FF_SCHEMA, else the search_path)
#   make build     binaries into bin/
#   make devdb-stop  stop the throwaway cluster scripts/devdb.sh may have started
#
# Extra arguments for demo, bench and migrate: make demo ARGS='--help'.
# DATABASE_URL, when set and answering, is used as it is.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

GO ?= go
DEVDB := scripts/devdb.sh
BROWSER := scripts/browser.sh
# staticcheck 2026.2.x, the first release line that knows Go 1.26.
STATICCHECK_VERSION ?= v0.8.2
STATICCHECK := $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
TEST_TIMEOUT ?= 20m
ARGS ?=
# The library's packages and the binaries' (cmd/ is a module of its own,
# joined to the library's by go.work: from here ./... is the library only).
PKGS := ./... ./cmd/...

# db prints what the database step does and exports DATABASE_URL for the rest
# of the recipe line. Passwords are never printed.
define db
echo "==> database: asking scripts/devdb.sh (\$$DATABASE_URL, else 127.0.0.1:5432, else a throwaway cluster in .devdb/, else installing PostgreSQL)"; \
DATABASE_URL="$$($(DEVDB))" || { echo "==> database: none found; see the message above" >&2; exit 1; }; \
export DATABASE_URL; \
echo "==> database: DATABASE_URL=$$(sed -E 's#^([a-zA-Z]+://[^:/@]*):[^@]*@#\1:***@#' <<<"$$DATABASE_URL")"
endef

# ffctl_run NAME builds bin/ffctl and runs `ffctl NAME $(ARGS)` against the local
# database when that command exists; else it says the command is coming and
# succeeds.
define ffctl_run
$(GO) build -o bin/ffctl ./cmd/ffctl; \
if ! bin/ffctl help | grep -qE '^  $(1)( |$$)'; then \
	echo "ffctl $(1) is coming: this target will run it once cmd/ffctl has the $(1) command."; \
	exit 0; \
fi; \
$(call db); \
echo "==> bin/ffctl $(1) $(ARGS)"; \
exec bin/ffctl $(1) $(ARGS)
endef

.PHONY: test browser-test screenshots vet lint demo bench migrate build devdb devdb-stop

# browser exports FF_CHROMIUM, the headless Chromium of the browser test, for
# the rest of the recipe line. Without one, CI=true fails; elsewhere the
# browser test skips, saying so.
define browser
echo "==> browser: asking scripts/browser.sh (\$$FF_CHROMIUM, else chromium on PATH, else installing Debian's chromium)"; \
if FF_CHROMIUM="$$($(BROWSER) check)"; then \
	export FF_CHROMIUM; \
	echo "==> browser: FF_CHROMIUM=$$FF_CHROMIUM"; \
elif [[ "$${CI:-}" == true ]]; then \
	echo "==> browser: none found or installed, and CI=true: a browser test is never skipped in CI (see the message above)" >&2; \
	exit 1; \
else \
	unset FF_CHROMIUM; \
	echo "==> browser: none; the browser test will be skipped (see the message above)"; \
fi
endef

test:
	@$(call db); \
	$(call browser); \
	echo "==> go vet $(PKGS)"; \
	$(GO) vet $(PKGS); \
	echo "==> go test -race -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)"; \
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)

# The browser test's screenshots are kept under $(FF_ARTIFACTS), else
# bin/artifacts/TestBrowser/.
browser-test:
	@$(call db); \
	$(call browser); \
	echo "==> go test -count=1 -v -run '^TestBrowser$$' ./cmd/internal/ffview/"; \
	$(GO) test -count=1 -v -run '^TestBrowser$$' ./cmd/internal/ffview/

screenshots:
	@$(call db); \
	$(call browser); \
	[[ -n "$${FF_CHROMIUM:-}" ]] || { echo "==> screenshots need a browser" >&2; exit 1; }; \
	echo "==> FF_SCREENSHOTS=docs/screenshots go test -count=1 -run '^TestBrowser$$' ./cmd/internal/ffview/"; \
	FF_SCREENSHOTS=docs/screenshots $(GO) test -count=1 -run '^TestBrowser$$' ./cmd/internal/ffview/; \
	ls -l docs/screenshots/

vet:
	$(GO) vet $(PKGS)

lint:
	@echo "==> gofmt -l"; \
	files="$$(find . -name '*.go' -not -path './.git/*' -not -path './.devdb/*' -not -path './bin/*' -print | sort)"; \
	unformatted="$$(gofmt -l $$files)"; \
	if [[ -n "$$unformatted" ]]; then echo "$$unformatted"; echo "gofmt: the files above need gofmt -w" >&2; exit 1; fi
	@echo "==> go vet $(PKGS)"; $(GO) vet $(PKGS)
	@echo "==> staticcheck $(STATICCHECK_VERSION) $(PKGS)"; $(STATICCHECK) $(PKGS)

demo:
	@$(call ffctl_run,demo)

bench:
	@$(call ffctl_run,bench)

migrate:
	@$(call ffctl_run,migrate)

# -buildvcs=auto: stamp the git commit into the binaries (--version) even where
# GOFLAGS says -buildvcs=false, and build without it where there is no git.
build:
	@mkdir -p bin
	$(GO) build -buildvcs=auto -o bin/ ./cmd/...

# devdb prints the URL make test would use.
devdb:
	@$(DEVDB)

devdb-stop:
	@$(DEVDB) stop
