# CONTRIBUTING's commands: `make test` the tests, `make demo` the demo;
# both bring their own redis-server (installed with apt-get when missing and root);
# make test also brings PostgreSQL's server binaries (postgres-deps).

GO      ?= go
MODULES := . scripts_test
# the observer adapters: modules of their own (OpenTelemetry, Prometheus)
OBSERVE_MODULES := observe/otel observe/prometheus
# the integrations, modules of their own: frameworks (watermill, asynq) and
# brokers (nats.go + nats-server in process, franz-go + kfake)
# and the Postgres inbox (pgx, on a PostgreSQL server the tests start)
INTEGRATION_MODULES := integrations/watermill integrations/asynq integrations/jetstream integrations/kafka integrations/postgres
# make test runs every test every time (-count=1: a test against a real server
# is not cached); make check keeps Go's test cache on.
TESTFLAGS ?= -count=1
# The modules build from this checkout through the workspace (go.work), whatever
# GOWORK the caller has; the root module, which requires none of the others,
# builds from its own go.mod alone (GOWORK=off), as a user's build gets it.
export GOWORK := $(CURDIR)/go.work
# go.work's replace lines (the release being prepared => its directory), as
# go mod edit flags: make tidy adds them to a module's go.mod while it tidies.
LOCAL_REPLACES := $(shell sed -n 's|^[[:space:]]*\(github.com/redisonce/[^ ]*\) \(v[^ ]*\) => \./\(.*\)$$|-replace=\1@\2=$(CURDIR)/\3|p' go.work)
LOCAL_DROPS := $(shell sed -n 's|^[[:space:]]*\(github.com/redisonce/[^ ]*\) \(v[^ ]*\) => .*$$|-dropreplace=\1@\2|p' go.work)

.PHONY: all check test test-failover test-release release-version release-tags fuzz demo bench sums lint tidy redis-server postgres-deps luacheck noncgo-deps netns-deps

all: test

# ensure a redis-server binary: use the one on PATH, else install it (root + apt-get).
redis-server:
	@if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "make: installing redis-server and redis-tools with apt-get"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools >/dev/null; \
	elif command -v sudo >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && sudo -n true 2>/dev/null; then \
	  echo "make: installing redis-server and redis-tools with sudo apt-get"; \
	  sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools >/dev/null; \
	else \
	  echo "make: redis-server (>= 7.0) is needed and I cannot install it here."; \
	  echo "      Install it: 'sudo apt-get install redis-server redis-tools' (Debian/Ubuntu) or 'brew install redis' (macOS),"; \
	  echo "      then run make again."; \
	  exit 1; \
	fi
	@redis-server --version

# ensure PostgreSQL's server binaries (initdb, postgres) for the tests that
# start their own server (internal/pgproc): those on PG_BINDIR or in
# /usr/lib/postgresql/*/bin, else Debian's postgresql (root + apt-get, or sudo).
# The tests run them as the postgres account the package creates when they
# run as root. Without them those tests skip, and fail under CI=true.
postgres-deps:
	@if [ -n "$$PG_BINDIR" ] && [ -x "$$PG_BINDIR/initdb" ]; then :; \
	elif ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "make: installing postgresql with apt-get"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; \
	elif command -v sudo >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && sudo -n true 2>/dev/null; then \
	  echo "make: installing postgresql with sudo apt-get"; \
	  sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; \
	else \
	  echo "make: the Postgres tests need PostgreSQL's server binaries (initdb, postgres) and I cannot install them here."; \
	  echo "      Install them: 'sudo apt-get install postgresql' (Debian/Ubuntu) or 'brew install postgresql@15' (macOS),"; \
	  echo "      or set PG_BINDIR to their directory. Without them those tests skip (and fail under CI=true)."; \
	fi

# the non-Go clients scripts_test/noncgo_clients_test.go drives: redis-py
# (Debian's python3-redis, for /usr/bin/python3) and Node.js with the packages
# pinned in scripts_test/noncgo/package-lock.json (npm ci). Installed when
# missing (apt-get as root or with sudo). Never fatal: when it cannot install
# them (no root, offline) it says so, and those tests skip with a message.
NONCGO := scripts_test/noncgo
NPM_CI := npm ci --no-audit --no-fund --loglevel=error --fetch-retries=2 --fetch-retry-mintimeout=1000 --fetch-retry-maxtimeout=5000
noncgo-deps:
	@pkgs=""; \
	/usr/bin/python3 -c 'import redis' 2>/dev/null || python3 -c 'import redis' 2>/dev/null || pkgs="$$pkgs python3-redis"; \
	command -v node >/dev/null 2>&1 || pkgs="$$pkgs nodejs"; \
	command -v npm >/dev/null 2>&1 || pkgs="$$pkgs npm"; \
	if [ -z "$$pkgs" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "make: installing$$pkgs with apt-get"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$pkgs >/dev/null; } || \
	    echo "make: apt-get install$$pkgs failed; the non-Go client tests will skip"; \
	elif command -v sudo >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && sudo -n true 2>/dev/null; then \
	  echo "make: installing$$pkgs with sudo apt-get"; \
	  { sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$pkgs >/dev/null; } || \
	    echo "make: apt-get install$$pkgs failed; the non-Go client tests will skip"; \
	else \
	  echo "make: the non-Go client tests need$$pkgs (python3-redis: redis-py; nodejs, npm: Node.js >= 18); they skip without."; \
	fi
	@if command -v npm >/dev/null 2>&1 && ! [ $(NONCGO)/node_modules/.package-lock.json -nt $(NONCGO)/package-lock.json ]; then \
	  echo "make: npm ci in $(NONCGO)"; \
	  (cd $(NONCGO) && $(NPM_CI)) || echo "make: npm ci in $(NONCGO) failed (offline?); the Node.js client tests will skip"; \
	fi

# the lease fault tests' network namespaces (scripts_test/faults_lease_netns_test.go)
# need root, iproute2 and iptables: installed when missing and root. Never fatal:
# without them those tests skip with a message.
netns-deps:
	@pkgs=""; \
	command -v ip >/dev/null 2>&1 || pkgs="$$pkgs iproute2"; \
	command -v iptables >/dev/null 2>&1 || pkgs="$$pkgs iptables"; \
	if [ -z "$$pkgs" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "make: installing$$pkgs with apt-get"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$pkgs >/dev/null; } || \
	    echo "make: apt-get install$$pkgs failed; the network-namespace lease tests will skip"; \
	else \
	  echo "make: the network-namespace lease tests need root and$$pkgs; they skip without."; \
	fi

test: redis-server postgres-deps noncgo-deps netns-deps
	GOWORK=off $(GO) vet ./...
	GOWORK=off $(GO) test $(TESTFLAGS) -race -timeout 20m ./...
# scripts_test with -p 1: its fault tests' margins are tens of ms; benchcmp's tests beside them would take a core.
	cd scripts_test && $(GO) vet ./... && $(GO) test $(TESTFLAGS) -p 1 -race -timeout 30m ./...
	cd adapters/gojob && $(GO) vet ./... && $(GO) test $(TESTFLAGS) -race -timeout 10m ./...
	for m in $(OBSERVE_MODULES); do (cd $$m && $(GO) vet ./... && $(GO) test $(TESTFLAGS) -race -timeout 10m ./...) || exit 1; done
	for m in $(INTEGRATION_MODULES); do (cd $$m && $(GO) vet ./... && $(GO) test $(TESTFLAGS) -race -timeout 10m ./...) || exit 1; done
	$(MAKE) test-failover
	$(MODFILES_UNCHANGED)

# check: the quick loop while you work (under a minute once Go's caches are
# warm): go vet in every module, then the tests that need no redis-server —
# the unit tests, the memory twins against the conformance suites, the
# scripts' headers and snippets, the docs' snippets and links — with Go's test
# cache on, so only what a change touches runs again (-short: the store's
# conformance suites on Redis skip). make test is the whole.
CHECK_PKGS := . ./store/... ./httpidem/... ./internal/delivery ./internal/inflight ./internal/recordlayout \
	./cmd/redisonce/internal/inspect ./cmd/redisonce/internal/server
check:
	GOWORK=off $(GO) vet ./...
	for m in scripts_test adapters/gojob $(OBSERVE_MODULES) $(INTEGRATION_MODULES); do (cd $$m && $(GO) vet ./...) || exit 1; done
	GOWORK=off $(GO) test -short -timeout 5m $(CHECK_PKGS)
	for m in $(OBSERVE_MODULES); do (cd $$m && $(GO) test -timeout 5m ./...) || exit 1; done
	$(MODFILES_UNCHANGED)

# MODFILES_UNCHANGED ends make test and make check: running the tests changed
# no go.mod, go.sum, go.work or go.work.sum (their git diff is what it was when
# make started). go.work.sum holds the go.mod checksums of the workspace's
# whole module graph, so no go command in workspace mode needs to add one.
MODFILES := go.work go.work.sum ':(glob)**/go.mod' ':(glob)**/go.sum'
MODFILES_AT_START := $(shell git diff -- $(MODFILES) 2>/dev/null | sha1sum)
MODFILES_UNCHANGED = @if [ "$$(git diff -- $(MODFILES) 2>/dev/null | sha1sum)" != "$(MODFILES_AT_START)" ]; then \
	  echo "make: running the tests changed module files:"; git diff --stat -- $(MODFILES); exit 1; fi

# test-failover: real failovers (scripts_test/failover_test.go, ~25 s): a
# primary, a replica and three sentinels, the primary SIGKILLed mid-load three
# times, with and without WithWaitReplicas; prints what each operation
# acknowledged, lost and surfaced. It runs alone, after the other tests, because the
# sentinels' timing (down-after 1.5 s) wants a machine that is not busy with
# them; `go test` without REDISONCE_FAILOVER=1 skips it.
test-failover: redis-server
	cd scripts_test && REDISONCE_FAILOVER=1 $(GO) test -race -count=1 -timeout 5m -run '^TestFailover$$' -v .

# fuzz runs every fuzz target of scripts_test for FUZZTIME each (their seed
# corpora, f.Add and testdata/fuzz, already run as plain tests in `make test`).
# A failing input is written to scripts_test/testdata/fuzz/<target>/: commit it
# with the fix, and it stays a regression test. The default budget is a count
# of executions (about 5-15 s each here), not a duration: Go 1.26's fuzz
# coordinator can fail a duration-bounded run with a spurious "context
# deadline exceeded" as the time runs out (go.dev/issue/75804).
FUZZTIME ?= 5000x
FUZZ_TARGETS ?= $(shell grep -ho '^func Fuzz[A-Za-z0-9]*' scripts_test/*_test.go | cut -c6-)

fuzz: redis-server
	cd scripts_test && for f in $(FUZZ_TARGETS); do \
	  echo "make: fuzzing $$f for $(FUZZTIME)"; \
	  $(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) . || exit 1; \
	done
	@echo "make: fuzzing internal/recordlayout FuzzDecode for $(FUZZTIME)"
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./internal/recordlayout

demo: redis-server
	$(GO) run ./cmd/redisonce demo

# bench: the Go benchmarks (for benchstat); the Kafka and JetStream
# integrations beside plain consumers of their own (~50 s); then the side-by-side comparison
# (scripts_test/cmd/benchcmp) on a redis-server of its own, pinned like
# BENCHMARKS.md says when taskset is there: server on CPU 0, client on CPU 1.
# The comparison's report is also written to bin/bench.md. Then the Postgres
# inbox beside a SQL-only inbox (BENCHMARKS.md, "The Postgres inbox").
BENCHFLAGS ?=
CONSUMER_BENCH_MODULES := integrations/kafka integrations/jetstream
INBOXBENCHFLAGS ?=
bench: redis-server postgres-deps
	cd scripts_test && $(GO) test -run '^$$' -bench . -benchmem -benchtime 500ms -timeout 10m .
	@# the Kafka and JetStream integrations beside plain consumers of their own
	@# (BenchmarkConsumer: interleaved rounds, medians; BENCHMARKS.md)
	for m in $(CONSUMER_BENCH_MODULES); do (cd $$m && $(GO) test -run '^$$' -bench '^BenchmarkConsumer$$' -benchtime 1x -timeout 10m .) || exit 1; done
	cd scripts_test && $(GO) build -o ../bin/benchcmp ./cmd/benchcmp
	@if command -v taskset >/dev/null 2>&1 && [ "$$(nproc)" -ge 2 ]; then \
	  echo "taskset -c 1 bin/benchcmp -server-cpu 0 -out bin/bench.md $(BENCHFLAGS)"; \
	  taskset -c 1 bin/benchcmp -server-cpu 0 -out bin/bench.md $(BENCHFLAGS); \
	else \
	  echo "bin/benchcmp -out bin/bench.md $(BENCHFLAGS)  (not pinned: no taskset or one CPU)"; \
	  bin/benchcmp -out bin/bench.md $(BENCHFLAGS); \
	fi
	@# the Postgres inbox beside a plain SQL-only inbox on one PostgreSQL server
	@# (integrations/postgres/internal/inboxbench; report also in bin/inbox-bench.md)
	cd integrations/postgres && $(GO) build -o ../../bin/inboxbench ./internal/inboxbench
	bin/inboxbench -out bin/inbox-bench.md $(INBOXBENCHFLAGS)

sums:
	cd scripts && sha1sum *.lua > SHA1SUMS

luacheck:
	@command -v luacheck >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq lua-check >/dev/null; \
	  else echo "make: luacheck is needed: sudo apt-get install lua-check (or luarocks install luacheck)"; exit 1; fi; }

lint: luacheck
	GOWORK=off $(GO) vet ./...
	cd scripts_test && $(GO) vet ./...
	cd adapters/gojob && $(GO) vet ./...
	for m in $(OBSERVE_MODULES); do (cd $$m && $(GO) vet ./...) || exit 1; done
	for m in $(INTEGRATION_MODULES); do (cd $$m && $(GO) vet ./...) || exit 1; done
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	luacheck --no-color --globals redis struct KEYS ARGV -- scripts/*.lua

# tidy: go mod tidy in every module. A module that requires another of this
# repository at the release being prepared (no tag yet, so no proxy has it)
# is tidied with go.work's replace lines added to its go.mod, dropped again
# after: a published go.mod never keeps a replace (docs/releasing.md).
TIDY_MODULES := scripts_test adapters/gojob $(OBSERVE_MODULES) $(INTEGRATION_MODULES)
tidy:
	GOWORK=off $(GO) mod tidy
	for m in $(TIDY_MODULES); do \
	  (cd $$m && $(GO) mod edit $(LOCAL_REPLACES) && GOWORK=off $(GO) mod tidy; rc=$$?; \
	   $(GO) mod edit $(LOCAL_DROPS) && exit $$rc) || exit 1; \
	done

# Releasing (docs/releasing.md). test-release: the release test on its own
# (part of make test): the layout checks, then every published module tagged in
# a throwaway repository, served from a file-based proxy and built by a fresh
# consumer module with no replace and no workspace.
test-release:
	cd scripts_test && $(GO) test -count=1 -run '^(TestReleaseLayout|TestModulesFromLocalProxy)$$' -v .

# release-version VERSION=vX.Y.Z: every requirement of one module of this
# repository on another, and go.work's replace lines, name VERSION.
release-version:
	@case "$(VERSION)" in v[0-9]*.[0-9]*.[0-9]*) ;; *) echo "usage: make release-version VERSION=vX.Y.Z"; exit 2;; esac
	sed -i 's|\(github\.com/redisonce/redisonce[^ ]*\) v[0-9][^ ]*|\1 $(VERSION)|' go.work $$(git ls-files --cached --others --exclude-standard -- ':(glob)**/go.mod')
	@git diff --stat -- go.work ':(glob)**/go.mod'

# release-tags VERSION=vX.Y.Z: the tags of the release, in the order to push
# them: the root module first, then <dir>/VERSION for every other module that
# go.work uses (scripts_test is not published).
release-tags:
	@case "$(VERSION)" in v[0-9]*.[0-9]*.[0-9]*) ;; *) echo "usage: make release-tags VERSION=vX.Y.Z"; exit 2;; esac
	@echo $(VERSION); $(GO) work edit -json | sed -n 's|^[[:space:]]*"DiskPath": "\./\(.*\)"[,]*$$|\1/$(VERSION)|p' | grep -v '^scripts_test/'
