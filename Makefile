# One command runs what CI runs: `make test` is exactly what .ci/run calls.
CARGO ?= cargo
FUZZ_SECONDS ?= 60

.PHONY: test deps demo build fmt lint fuzz bench chaos sim

test: deps
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) test --workspace
	$(MAKE) sim

# What the tests need beyond Cargo (Debian packages, npm, Maven), installed when missing.
deps:
	./scripts/test-deps.sh

# A living market with the dashboard at https://127.0.0.1:8080/ (until Ctrl-C on a terminal),
# then the engine and fairness benchmarks in brief (scripts/demo.sh).
demo: build
	./scripts/demo.sh

build:
	$(CARGO) build --release -p bourse

fmt:
	$(CARGO) fmt --all

lint:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# The deterministic simulator (crates/simulator): SIM_SEEDS seeds from SIM_SEED, 3 members
# and 2 gateways, then a tenth as many with 5 members and clients sending straight to
# the nodes, then a twentieth as many of the partitioned exchange as three Raft groups of 3
# members and a fiftieth as many as two groups of 5; it stops at the first failing seed
# and prints the command that replays it. `make sim SIM_SEEDS=100000` runs for hours.
SIM_SEED ?= 1
SIM_SEEDS ?= 200
sim:
	$(CARGO) run -q -p bourse -- sim --seed $(SIM_SEED) --seeds $(SIM_SEEDS)
	$(CARGO) run -q -p bourse -- sim --seed $(SIM_SEED) --seeds $$(( $(SIM_SEEDS) / 10 + 1 )) --nodes 5 --gateways 0
	$(CARGO) run -q -p bourse -- sim --groups 3 --seed $(SIM_SEED) --seeds $$(( $(SIM_SEEDS) / 20 + 1 ))
	$(CARGO) run -q -p bourse -- sim --groups 2 --nodes 5 --seed $(SIM_SEED) --seeds $$(( $(SIM_SEEDS) / 50 + 1 ))
	$(CARGO) run -q -p bourse -- sim --groups 4 --meta-group --seed $(SIM_SEED) --seeds $$(( $(SIM_SEEDS) / 50 + 1 ))

# Random faults on a real 5-node cluster under load, in release (crates/bourse/tests/cluster.rs):
# `make chaos BOURSE_CHAOS_SECS=600 BOURSE_CHAOS_SEED=42`.
chaos:
	$(CARGO) test --release -p bourse --test cluster chaos_long -- --ignored --nocapture

# The real fuzzer (cargo-fuzz on nightly): `make fuzz FUZZ_SECONDS=600`.
fuzz:
	command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	cd crates/engine && $(CARGO) +nightly fuzz run decode -- -max_total_time=$(FUZZ_SECONDS)
	cd crates/engine && $(CARGO) +nightly fuzz run apply -- -max_total_time=$(FUZZ_SECONDS)
	cd crates/fix && $(CARGO) +nightly fuzz run decode -- -max_total_time=$(FUZZ_SECONDS)
	cd crates/xml && $(CARGO) +nightly fuzz run parse -- -max_total_time=$(FUZZ_SECONDS)
	cd crates/fix && $(CARGO) +nightly fuzz run session -- -max_total_time=$(FUZZ_SECONDS)
	cd crates/fix && $(CARGO) +nightly fuzz run store -- -max_total_time=$(FUZZ_SECONDS)
	cd crates/http && $(CARGO) +nightly fuzz run body -- -max_total_time=$(FUZZ_SECONDS)
	cd crates/xml && $(CARGO) +nightly fuzz run framing -- -max_total_time=$(FUZZ_SECONDS)
	cd crates/xml && $(CARGO) +nightly fuzz run execute -- -max_total_time=$(FUZZ_SECONDS)
	cd crates/protocol && $(CARGO) +nightly fuzz run convert -- -max_total_time=$(FUZZ_SECONDS)
	cd crates/cluster && $(CARGO) +nightly fuzz run frames -- -max_total_time=$(FUZZ_SECONDS)
	cd crates/daytrading && $(CARGO) +nightly fuzz run workload -- -max_total_time=$(FUZZ_SECONDS)

bench: build
	./target/release/bourse bench engine --workload ec2020
	./target/release/bourse bench engine --workload ec2018
	./target/release/bourse bench engine --workload sweep
	./target/release/bourse bench engine --workload scale
	./target/release/bourse bench recovery
