# quota — the two commands a new machine needs are `make run` and `make test`.
SHELL := /bin/bash
GO    ?= go
BIN   := bin

# make run uses a development admin token (unless one is set) so PUT /v1/rules works locally.
DEV_ADMIN_TOKEN ?= dev-admin-token-change-me

.PHONY: run test build services schema bench bench-algorithms lint fuzz clean

FUZZTIME ?= 60s

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./cmd/...

# Install (apt-get) and start Redis and MariaDB when missing; leave running ones alone.
services:
	@bash deploy/ensure-services.sh

schema: services build
	$(BIN)/quotad migrate-schema

run: schema
	QUOTA_ADMIN_TOKEN=$${QUOTA_ADMIN_TOKEN:-$(DEV_ADMIN_TOKEN)} $(BIN)/quotad serve

test: services
	$(GO) test -race -count=1 ./...

bench: schema
	bash bench/quotad.sh

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

# The same workload through each algorithm (BENCHMARKS.md).
bench-algorithms: schema
	bash bench/algorithms.sh

# Each fuzz target for FUZZTIME; their seed corpora already run in `make test`.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeCheck$$' -fuzztime $(FUZZTIME) ./api/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeBatch$$' -fuzztime $(FUZZTIME) ./api/
	$(GO) test -run '^$$' -fuzz '^FuzzParseYAML$$' -fuzztime $(FUZZTIME) ./rules/
	$(GO) test -run '^$$' -fuzz '^FuzzWarmRecordDecode$$' -fuzztime $(FUZZTIME) ./tiers/

lint:
	gofmt -l . | (! grep .)
	$(GO) vet ./...
	$$($(GO) env GOPATH)/bin/staticcheck ./... 

clean:
	rm -rf $(BIN) bench-out

# The dashboard in headless Chromium (installs Debian's chromium when missing);
# screenshots land in test-output/.
.PHONY: test-dashboard
test-dashboard: services
	bash deploy/chromium-test.sh
	$(GO) test -count=1 -run TestDashboardInChromium -v ./api/

# Fault injection (build tag `faults`, not in `make test`): quotad binaries
# against private redis-server / mariadbd processes on spare ports that the
# tests kill, hang and restart; ~11 minutes (~6.5 of them the SIGKILL in the
# middle of a migration, which waits out the dead worker's 30 s leases).
# FAULTS_RACE=1 builds quotad with the race detector.
# Figures: bench-out/faults.txt; log: bench-out/faults-test.log.
.PHONY: test-faults soak
FAULTS_RACE ?=
test-faults: services
	@mkdir -p bench-out
	set -o pipefail; QUOTA_TEST_RACE=$(FAULTS_RACE) FAULTS_FIGURES=$(CURDIR)/bench-out/faults.txt \
		$(GO) test -tags faults -count=1 -timeout 30m -v ./internal/faults/ 2>&1 | tee bench-out/faults-test.log

# Soak: the maximum throughput (closed loop, 20 s, 64 connections), then an
# open loop at 70% of it for SOAK_DURATION (default 10m) on a private Redis,
# sampling RSS and goroutines; bench-out/soak.json and soak.txt.
soak: services build
	$(GO) build -o $(BIN)/ ./bench/cmd/quotasoak
	$(BIN)/quotasoak

# Bytes per counter in each storage tier for BENCH_MEMORY_N identities: hot
# (alone and through the tier router) and warm on a private redis-server
# (redis.conf's listpack limits), cold on fresh quota_bench_* databases on
# the local MariaDB, dropped afterwards; then the cold filter (a cold cell's
# Redis) for 1,000 apps x 100 cells and for 1 app x 1,000,000 cells.
# ~5 minutes; figures in bench-out/memory.txt.
.PHONY: bench-memory
BENCH_MEMORY_N ?= 1000000
bench-memory: services
	@mkdir -p bench-out
	set -o pipefail; { $(GO) run ./bench/cmd/quotabench-memory -n $(BENCH_MEMORY_N) -tiers hot,warm,cold && \
		$(GO) run ./bench/cmd/quotabench-memory -n 100000 -apps 1000 -tiers filter && \
		$(GO) run ./bench/cmd/quotabench-memory -n 1000000 -apps 1 -tiers filter; } | tee bench-out/memory.txt

# What a move of 1,000 hot cells (each of its own app) to cold costs, step
# by step (migrate's BenchmarkMoveCells_HotToCold; ~5 s).
.PHONY: bench-move
bench-move: services
	$(GO) test -run '^$$' -bench BenchmarkMoveCells_HotToCold -benchtime 20x ./migrate/

# Tiering on against off, alternated in one run, for uniform keys, skewed
# keys and batches of new identities; MariaDB statements per 1,000 checks
# beside each (bench/tiering.sh). ~8 minutes; bench-out/tiering/summary.txt.
.PHONY: bench-tiering
bench-tiering: schema
	bash bench/tiering.sh

# Issue 4's Zipf migration benchmark: fill, replay, one `quotactl migrate`,
# replay right after and settled, on a private redis-server (port 16391) and
# fresh quota_zipf_* databases (dropped afterwards); ZIPF_* knobs and any
# QUOTA_* passed to quotad (bench/zipf-cycle.sh). ~10 minutes at 10 M
# identities; figures in bench-out/zipf-cycle/summary.txt.
.PHONY: bench-zipf-cycle
bench-zipf-cycle: services build
	bash bench/zipf-cycle.sh
