# quota — the two commands a new machine needs are `make run` and `make test`.
SHELL := /bin/bash
GO    ?= go
BIN   := bin

# make run uses a development admin token (unless one is set) so PUT /v1/rules works locally.
DEV_ADMIN_TOKEN ?= dev-admin-token-change-me

.PHONY: run test build services schema bench bench-algorithms lint fuzz clean

# The version quotad reports (quotad version, quota_build_info).
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS  := -X github.com/quota-platform/quota/internal/version.Version=$(VERSION) \
            -X github.com/quota-platform/quota/internal/version.Revision=$(REVISION)

FUZZTIME ?= 60s

build:
	@mkdir -p $(BIN)
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/...

# Install (apt-get) and start Redis and MariaDB when missing; leave running ones alone.
services:
	@bash deploy/ensure-services.sh

schema: services build
	$(BIN)/quotad migrate-schema

run: schema
	QUOTA_ADMIN_TOKEN=$${QUOTA_ADMIN_TOKEN:-$(DEV_ADMIN_TOKEN)} $(BIN)/quotad serve

# go test -race over the tree, then again without -race the tests of every
# `//go:build !race` file (allocation counts the race detector spoils), all
# read through internal/testsupport/cmd/testsummary: "ok"/"FAIL" per
# package, then failed tests' output, skipped tests with their reasons and
# the counts ("skipped: N"). Under CI=true a skipped test fails the run.
NORACE_FILES := $(shell grep -rl --include='*_test.go' '^//go:build !race' . 2>/dev/null)
NORACE_PKGS  := $(sort $(dir $(NORACE_FILES)))
NORACE_SED   := s/^func \(Test[A-Za-z0-9_]*\)[(].*/\1/p
NORACE_TESTS := $(shell sed -n '$(NORACE_SED)' $(NORACE_FILES) /dev/null | paste -sd'|')
TESTSUMMARY_FLAGS := $(if $(filter true,$(CI)),-fail-on-skip)

test: services test-tools
	@$(GO) build -o $(BIN)/testsummary ./internal/testsupport/cmd/testsummary
	@set -o pipefail; { \
		rc=0; \
		$(GO) test -race -count=1 -json ./... || rc=1; \
		$(if $(NORACE_TESTS),$(GO) test -count=1 -json -run '^($(NORACE_TESTS))$$' $(NORACE_PKGS) || rc=1;) \
		exit $$rc; \
	} 2>&1 | $(BIN)/testsummary $(TESTSUMMARY_FLAGS)

# The tools deploy/'s and gateways/' tests run (promtool, systemd-analyze, docker-compose, nginx),
# installed with apt-get when missing.
.PHONY: test-tools
test-tools:
	@bash internal/testsupport/testenv/ensure-tool.sh promtool systemd-analyze docker-compose nginx >/dev/null

# Static binaries (quotad, quotactl) for each platform, with the LICENSE,
# README, CHANGELOG, default rules and systemd unit, as
# dist/quota_<version>_<os>_<arch>.tar.gz, and dist/SHA256SUMS.
RELEASE_PLATFORMS ?= linux/amd64 linux/arm64
.PHONY: release
release:
	rm -rf dist && mkdir -p dist
	set -e; for p in $(RELEASE_PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; d=quota_$(VERSION)_$${os}_$${arch}; \
		mkdir -p dist/$$d; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o dist/$$d/ ./cmd/quotad ./cmd/quotactl; \
		cp LICENSE README.md CHANGELOG.md deploy/rules.yaml dist/$$d/; cp -r deploy/systemd dist/$$d/; \
		tar -C dist -czf dist/$$d.tar.gz $$d; rm -rf dist/$$d; \
	done
	cd dist && sha256sum *.tar.gz > SHA256SUMS && cat SHA256SUMS

bench: schema
	bash bench/quotad.sh

# Envoy's rate limit service over gRPC (one call at a time on each of 64
# connections, and 64 calls multiplexed on 4 as an Envoy) against POST
# /v1/check, same keys, same quotad, taking turns; closed loop and at 4,630
# checks/s (~1.5 minutes).
.PHONY: bench-grpc
bench-grpc: schema
	$(GO) build -o $(BIN)/grpcbench ./bench/grpcbench
	bash bench/grpc.sh

# quotad beside envoyproxy/ratelimit (pinned commit, built when its source is
# here; PEERS_RATELIMIT_GIT), plain and with its local cache, one private
# Redis, the same limits: ordinary HTTP, ordinary gRPC and a flood, taking
# turns, with the servers that answer at once beside them (the floor;
# bench/peers.sh; ~6 minutes at PEERS_PHASE=10 PEERS_ROUNDS=3).
.PHONY: bench-peers
bench-peers: schema
	@command -v wrk >/dev/null || apt-get install -y wrk
	$(GO) build -o $(BIN)/grpcbench ./bench/grpcbench
	$(GO) build -o $(BIN)/nullhttp ./bench/cmd/nullhttp
	$(GO) build -o $(BIN)/nullquotad ./bench/cmd/nullquotad
	bash bench/peers.sh

# What net/http and fasthttp cost a check by themselves (bench/http-edge.sh):
# the measurement behind quotad's fasthttp edge (api/edge.go).
.PHONY: bench-http-edge
bench-http-edge:
	@command -v wrk >/dev/null || apt-get install -y wrk
	$(GO) build -o $(BIN)/nullhttp ./bench/cmd/nullhttp
	bash bench/http-edge.sh

# make bench-grpc's floor on this machine: the same load against a server
# that answers every check at once with no Redis (bench/cmd/nullquotad):
# what the load generator, the kernel, grpc-go and net/http cost alone.
.PHONY: bench-grpc-null
bench-grpc-null:
	$(GO) build -o $(BIN)/grpcbench ./bench/grpcbench
	$(GO) build -o $(BIN)/nullquotad ./bench/cmd/nullquotad
	QUOTAD_BIN=$(BIN)/nullquotad bash bench/grpc.sh

# What analytics costs the check path: off vs on, interleaved (BENCHMARKS.md).
.PHONY: bench-analytics
bench-analytics: schema
	bash bench/analytics-ab.sh

# The same at full speed with the two quotads taking turns in 30 s slots
# (bench/interleave.sh, bench/rules-1m.yaml; ~37 minutes at
# PAIRS=32), then the statistics (BENCHMARKS.md, "taking turns").
.PHONY: bench-analytics-interleave
bench-analytics-interleave: schema
	@mkdir -p bench-out/interleave
	QUOTA_RULES=bench/rules-1m.yaml IL_OUT=bench-out/interleave bash bench/interleave.sh | tee bench-out/interleave/log.txt
	bash bench/ab-stats.sh bench-out/interleave/log.txt

# What a distinct user costs Redis, sparse against dense HyperLogLogs (BENCHMARKS.md).
.PHONY: bench-hll
bench-hll: services
	$(GO) test -run '^$$' -bench 'BenchmarkPFADD|BenchmarkPackedRegisters' -benchtime 1x ./analytics/

# What the analytics flushes of a minute of make bench's uniform load cost
# MariaDB and Redis (private servers, CPU from /proc) and the recorder
# (BENCHMARKS.md); ~1 minute.
.PHONY: bench-analytics-servers
bench-analytics-servers: services
	$(GO) test -run '^$$' -bench 'BenchmarkFlushServerCPU' -benchtime 5x ./analytics/

# The per-user figures stored plainly (a usage_user_daily row per app,
# user, interface and day) against as chunks, in the same run on one private
# MariaDB: its CPU an entry and the table's bytes (analytics/userdays,
# Store.Write); ~15 minutes.
.PHONY: bench-userdays-layout
bench-userdays-layout: services
	$(GO) test -run '^$$' -bench 'BenchmarkUserLayout' -benchtime 8x -timeout 60m ./analytics/userdays/

# What plans cost a check: 10,000 apps on 3 plans with 1,000 overrides
# against the same rules without plans, alternated (bench/plans.sh).
.PHONY: bench-plans
bench-plans: schema
	ROUNDS=$${ROUNDS:-4} bash bench/plans.sh
	$(GO) test -run '^$$' -bench BuildOp -benchtime 200000x -count 5 ./limiter/

# A monthly quota over 1,000,000 identities each calling once, then one
# migration cycle: Redis bytes per identity, cells moved a second, counts
# intact (bench/monthly.sh; private redis-server, ~5 minutes).
.PHONY: bench-monthly
bench-monthly: build services
	bash bench/monthly.sh

# The same workload through each algorithm (BENCHMARKS.md).
bench-algorithms: schema
	bash bench/algorithms.sh

# Every fuzz target of the tree (found by name, so a new one is never left
# out) for FUZZTIME each; their seed corpora already run in `make test`.
fuzz:
	@set -e; for file in $$(grep -rl --include='*_test.go' '^func Fuzz' .); do \
		for target in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$file); do \
			echo "== $$target ($$(dirname $$file))"; \
			$(GO) test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) ./$$(dirname $$file)/; \
		done; \
	done

lint:
	gofmt -l . | (! grep .)
	$(GO) vet ./...
	$$($(GO) env GOPATH)/bin/staticcheck ./... 

clean:
	rm -rf $(BIN) bench-out dist

# The dashboard in headless Chromium (installs Debian's chromium when missing);
# screenshots land in test-output/.
.PHONY: test-dashboard
test-dashboard: services
	bash internal/testsupport/testenv/ensure-tool.sh chromium
	$(GO) test -count=1 -run 'TestDashboardInChromium|TestDashboard_Shows' -v ./api/

# Fault injection (build tag `faults`, not in `make test`): quotad binaries
# against private redis-server / mariadbd processes on spare ports that the
# tests kill, hang and restart; ~12 minutes (~6.5 of them the SIGKILL in the
# middle of a migration, which waits out the dead worker's 30 s leases).
# FAULTS_RACE=1 builds quotad with the race detector.
# Figures: bench-out/faults.txt; log: bench-out/faults-test.log.
.PHONY: test-faults soak
FAULTS_RACE ?=
test-faults: services
	@mkdir -p bench-out
	set -o pipefail; QUOTA_TEST_RACE=$(FAULTS_RACE) FAULTS_FIGURES=$(CURDIR)/bench-out/faults.txt \
		$(GO) test -tags faults -count=1 -timeout 30m -v ./internal/testsupport/faults/ 2>&1 | tee bench-out/faults-test.log

# Soak: the maximum throughput (closed loop, 20 s, 64 connections), then an
# open loop at 70% of it for SOAK_DURATION (default 10m) on a private Redis,
# sampling RSS and goroutines; bench-out/soak.json and soak.txt.
soak: services build
	$(GO) build -o $(BIN)/ ./bench/cmd/quotasoak
	$(BIN)/quotasoak

# Bytes per counter in each storage tier for BENCH_MEMORY_N identities: hot
# (alone and through the tier router) and warm on a private redis-server
# (redis.conf's listpack limits), cold on fresh quota_bench_* databases on
# the local MariaDB, dropped afterwards; then warm for 1 app x 1,000,000
# cells and 1,000 apps x 100 cells (per-key overheads weigh most there), and
# the cold filter (a cold cell's Redis) for 1,000 apps x 100 cells and for
# 1 app x 1,000,000 cells. ~10 minutes; figures in bench-out/memory.txt.
.PHONY: bench-memory
BENCH_MEMORY_N ?= 1000000
bench-memory: services
	@mkdir -p bench-out
	set -o pipefail; { $(GO) run ./bench/cmd/quotabench-memory -n $(BENCH_MEMORY_N) -tiers hot,warm,cold && \
		$(GO) run ./bench/cmd/quotabench-memory -n 1000000 -apps 1 -tiers warm && \
		$(GO) run ./bench/cmd/quotabench-memory -n 100000 -apps 1000 -tiers warm && \
		$(GO) run ./bench/cmd/quotabench-memory -n 100000 -apps 1000 -tiers filter && \
		$(GO) run ./bench/cmd/quotabench-memory -n 1000000 -apps 1 -tiers filter; } | tee bench-out/memory.txt

# What a move of 1,000 hot cells to cold costs, step by step (migrate's
# BenchmarkMoveCells_HotToCold), a cycle's fold of the flushed activity into
# cell_activity (migrate/activity's BenchmarkFoldActivityLog), and whole
# cycles moving 20,000 cells hot -> cold with 1, 2 and 4 part workers
# (migrate/worker's BenchmarkCycle_HotToCold:
# the per-worker pace). ~1 minute; CPU figures of Redis are this run's alone
# on a Redis of its own (QUOTA_TEST_REDIS_ADDR).
.PHONY: bench-move
bench-move: services
	$(GO) test -run '^$$' -bench 'BenchmarkMoveCells_HotToCold' -benchtime 20x ./migrate/
	$(GO) test -run '^$$' -bench 'BenchmarkFoldActivityLog' -benchtime 20x ./migrate/activity/
	$(GO) test -run '^$$' -bench 'BenchmarkCycle_HotToCold' -benchtime 3x ./migrate/worker/
	$(GO) test -run '^$$' -bench 'BenchmarkCompactColdFilters' -benchtime 3x ./migrate/worker/

# Redis instructions a cell of the quiet move's two scripts, a check of
# the check script, and a new cell's check with tiering off and on
# (BenchmarkNewCell_RedisInstructions), counted by valgrind's callgrind on a redis-server of
# the benchmark's own (Debian's valgrind package, installed when missing):
# figures that do not move with the machine's load, for comparing script
# changes. ~1 minute.
.PHONY: bench-scripts
bench-scripts: services
	@bash internal/testsupport/testenv/ensure-tool.sh valgrind >/dev/null
	$(GO) test -run '^$$' -bench 'BenchmarkPlatformChecks_RedisInstructions|BenchmarkQuietMove_RedisInstructions|BenchmarkCheck_RedisInstructions|BenchmarkNewCell_RedisInstructions' -benchtime 1x ./tiers/routing/

# MEMORY USAGE of one identity's key per algorithm and limit, after one
# call and after a window of calls at the limit's rate (BENCHMARKS.md);
# ~1 minute.
.PHONY: bench-algo-memory
bench-algo-memory: services
	$(GO) test -run '^$$' -bench 'BenchmarkAlgoMemory_PerIdentity' -benchtime 1x ./tiers/hot/

# The check path at a window's start in tags with cold cells: the hot
# script's cold-filter probe (no filter, one layer, layers grown without the
# cycle's estimate), Redis CPU an op on a redis-server of its own and the
# share of false "may be cold" answers. ~1 minute.
.PHONY: bench-filter
bench-filter: services
	$(GO) test -run '^$$' -bench 'BenchmarkHotCheck_FirstCallInATagWithColdCells' -benchtime 20000x -count 3 ./tiers/routing/

# Tiering on against off, alternated in one run, for uniform keys, skewed
# keys and batches of new identities; MariaDB statements per 1,000 checks
# beside each (bench/tiering.sh). ~8 minutes; bench-out/tiering/summary.txt.
.PHONY: bench-tiering
bench-tiering: schema
	bash bench/tiering.sh

# New cells and what a cell costs Redis in each tier, from outside (issue
# 52): batches of 500 new identities over 97 apps through POST
# /v1/check/batch, tiering off against on alternated (batches/s), and
# INFO used_memory's slope between 20,000 and 100,000 cells hot, moved warm
# and moved cold by `quotactl migrate` cycles (bench/cells.sh; private
# redis-server, fresh quota_bc_* databases; ~1 minute a round, ROUNDS=3),
# then RATE_ROUNDS=7 longer fills off and on for the on/off figure.
.PHONY: bench-cells
bench-cells: build services
	bash bench/cells.sh

# Issue 4's Zipf migration benchmark: fill, replay, one `quotactl migrate`,
# replay right after and settled, on a private redis-server (port 16391) and
# fresh quota_zipf_* databases (dropped afterwards); ZIPF_* knobs and any
# QUOTA_* passed to quotad (bench/zipf-cycle.sh). ~10 minutes at 10 M
# identities; figures in bench-out/zipf-cycle/summary.txt.
.PHONY: bench-zipf-cycle
bench-zipf-cycle: services build
	bash bench/zipf-cycle.sh

# What tracing costs a check through the handler: off (no OTLP endpoint,
# nothing wrapped) against on (spans made, exported nowhere); allocs/op.
.PHONY: bench-tracing
bench-tracing: services
	$(GO) test -run '^$$' -bench BenchmarkCheckTracing -benchmem -benchtime 5000x -count 3 ./tracing/

# Faults between hosts (issue 54; build tags `faults partitions`, root): a cluster and quotads in network namespaces cut apart, clocks 1 s apart, Redis SIGKILLed and restarted from its AOF, split brain with/without QUOTA_REDIS_WAIT_REPLICAS and its cost, each judged by the history checker (internal/testsupport/faults/history); ~5 minutes. Figures: bench-out/partitions.txt; log: bench-out/partitions-test.log.
.PHONY: test-partitions
test-partitions: services
	@bash internal/testsupport/testenv/ensure-tool.sh ip iptables >/dev/null
	@mkdir -p bench-out
	set -o pipefail; FAULTS_FIGURES=$(CURDIR)/bench-out/partitions.txt $(GO) test -tags 'faults partitions' -count=1 -timeout 30m -v \
		-run '^(TestPartitions|TestClockSkew|TestRedisCrash|TestSplitBrain|TestWaitReplicas)' ./internal/testsupport/faults/ 2>&1 | tee bench-out/partitions-test.log

# A production-shaped fleet on this machine (bench/fleet/fleet.sh): Redis
# Cluster of 3 masters + 3 replicas (7101-7106), two mariadbd with one shard
# each (3317, 3318), three quotad (18081-18083) behind nginx (18080). Run dir
# FLEET_DIR (/tmp/quota-fleet); QUOTA_* in the environment reach every quotad.
# make fleet-down stops exactly what make fleet started.
.PHONY: fleet fleet-down test-fleet bench-fleet
fleet: build
	bash bench/fleet/fleet.sh up

fleet-down:
	bash bench/fleet/fleet.sh down

# The fleet scenarios (issue 32) on a fleet make test-fleet starts and stops:
# exact limits per tier through nginx, one migration cycle for the fleet
# (and a crash in it), a Redis master killed under load (and the counts it
# lost), a shard server killed (internal/testsupport/faults/fleet_test.go; ~3 minutes plus the
# fleet's start). Figures: bench-out/fleet.txt; log: bench-out/fleet-test.log.
test-fleet: build
	@mkdir -p bench-out
	bash bench/fleet/fleet.sh up
	set -o pipefail; FAULTS_FIGURES=$(CURDIR)/bench-out/fleet.txt $(GO) test -tags 'faults fleet' -count=1 -timeout 20m \
		-run '^TestFleet' -v ./internal/testsupport/faults/ 2>&1 | tee bench-out/fleet-test.log; rc=$$?; bash bench/fleet/fleet.sh down; exit $$rc

# Checks/s and p99 through nginx with 1 and 3 quotad on the cluster
# (bench/fleet/bench.sh; bench-out/fleet/summary.txt).
bench-fleet: build
	bash bench/fleet/bench.sh
