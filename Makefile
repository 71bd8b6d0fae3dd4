# Weft's entry points: the same recipes run locally and in CI (.ci/run calls `make test`).
# On a bare Debian 12 machine they need only make and git: scripts/install-deps.sh
# installs the rest (Debian packages, and the Rust toolchain with rustup if missing).
#
#   make run          install what is missing, build, start a local cluster and show Weft at work
#   make test         install what is missing, lint, build, make the Debian packages, run
#                     every test (the packages' too) and a short fuzz run
#
#   make deps         install what building and testing need (scripts/install-deps.sh)
#   make build        cargo build --release --workspace, then the C test programs
#   make lint         rustfmt and clippy, as CI runs them
#   make docs         the guide (mdbook build docs: docs/book/), its link check, and the
#                     crates' documentation with warnings denied
#   make deb          Debian packages weft, libweft, libweft-dev, weft-mpiio-openmpi/-mpich in
#                     target/debian/ (mk/packaging.mk; packaging/README.md)
#   make dist         the release tarball (crates vendored: builds offline), target/dist/
#   make install      into PREFIX (default /usr/local; DESTDIR for staging): binaries,
#                     libraries, weft.h, weft.pc, CMake files (packaging/install.sh)
#   make fuzz-smoke   FUZZ_SECONDS (30) of libFuzzer per fuzz target
#   make bench        the concurrent-access benchmark (bench-noncontig: mk/bench-noncontig.mk)
#   make clean        cargo clean

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
# cargo runs its own jobs in parallel; the steps here must run in the order written.
.NOTPARALLEL:

CARGO ?= cargo
# rustup installs into $CARGO_HOME/bin (default ~/.cargo/bin), which is not on PATH in
# every shell (CI's, for one, or right after scripts/install-deps.sh installed Rust).
export PATH := $(or $(CARGO_HOME),$(HOME)/.cargo)/bin:$(PATH)

# MPI tests run as root in CI, and `mpirun -np 4` on CI's 2 cores needs oversubscription.
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
export OMPI_MCA_rmaps_base_oversubscribe := 1

# Hook for what is built besides the Rust workspace (the C test programs): add make targets
# to BUILD_EXTRA, preferably from a fragment mk/<crate>.mk. They are built after the
# workspace, so they can link against target/release.
BUILD_EXTRA :=
-include $(wildcard mk/*.mk)

# libFuzzer seconds per fuzz target in `make fuzz-smoke`; every file in fuzz/fuzz_targets/ runs.
FUZZ_SECONDS ?= 30
FUZZ_TARGETS = $(sort $(basename $(notdir $(wildcard fuzz/fuzz_targets/*.rs))))

.PHONY: all deps build run test test-build lint docs fuzz-smoke bench clean

all: build

deps:
	scripts/install-deps.sh

build:
	$(CARGO) build --release --workspace
	$(if $(strip $(BUILD_EXTRA)),$(MAKE) --no-print-directory $(BUILD_EXTRA))

test-build:
	$(CARGO) test --release --workspace --no-run

run: deps build
	scripts/demo.sh

# Lint first: it fails in a minute rather than after the test suite. `build` comes before
# the tests because integration tests start the workspace's binaries (weftd, weft) and the
# C programs, which `cargo test` of one crate does not build. `deb-packages` (seconds:
# no build of its own) makes the Debian packages that weft-tests' packages.rs installs
# and runs; so the dependencies are those of `make deb` (cargo-deb besides). The tests are
# built (`--no-run`) before the packages: building them links the binaries again with the
# dev-dependencies' features (weft-cli's tests use weft-testkit), and packages older than
# the binaries the tests run would fail packages.rs.
test: deb-deps lint docs build test-build deb-packages
	mkdir -p target
	$(CARGO) test --release --workspace 2>&1 | tee target/cargo-test.log
	$(MAKE) --no-print-directory fuzz-smoke
	$(MAKE) --no-print-directory dist-check
	scripts/test-summary.sh target/cargo-test.log

# The fuzz crate is a workspace of its own, so `--all` does not reach it.
lint:
	$(CARGO) fmt --all -- --check
	scripts/check-structure.py
	$(CARGO) fmt --manifest-path fuzz/Cargo.toml -- --check
	$(CARGO) clippy --workspace --all-targets --release -- -D warnings

# The guide (docs/, mdBook) and the crates' `//!` documentation. The link check reads
# every Markdown file of the repository and the built book: a relative link must name
# a file that exists (and a heading, with #anchor); links out of the repository fail.
# cargo doc runs with warnings denied, so a broken intra-doc link fails the build.
# README.md stays under 10,000 bytes and ARCHITECTURE.md under 30,000.
docs:
	@command -v mdbook >/dev/null || scripts/install-deps.sh
	mdbook build docs
	scripts/check-links.py --book docs/book
	@# The front page and the code map stay short (issue 36): details go to the guide.
	@for limit in README.md:10000 ARCHITECTURE.md:30000; do \
	    f=$${limit%%:*}; max=$${limit##*:}; size=$$(wc -c <"$$f"); \
	    if [ "$$size" -gt "$$max" ]; then \
	        echo "docs: $$f has $$size bytes, more than $$max: move details into docs/src/" >&2; exit 1; \
	    fi; \
	done
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps

# `-s none`: no sanitizer. The decoders are safe Rust, so AddressSanitizer finds nothing that
# a panic would not; without it the build takes ~15% less time, libFuzzer runs ~7x more inputs
# in the same seconds, and stable Rust suffices (ASan needs -Zsanitizer, so RUSTC_BOOTSTRAP=1).
# cargo fuzz still builds with optimisations plus debug assertions, so overflows panic.
# libFuzzer's progress goes to target/fuzz-<target>.log; a crash prints its tail, and the
# input that crashed is kept in fuzz/artifacts/<target>/.
fuzz-smoke:
	mkdir -p target
	$(CARGO) fuzz build --fuzz-dir fuzz -s none
	@for t in $(FUZZ_TARGETS); do \
	    echo "fuzz-smoke: $$t for $(FUZZ_SECONDS) s"; \
	    if ! $(CARGO) fuzz run --fuzz-dir fuzz -s none "$$t" -- \
	            -max_total_time=$(FUZZ_SECONDS) -timeout=10 >"target/fuzz-$$t.log" 2>&1; then \
	        tail -n 60 "target/fuzz-$$t.log"; \
	        echo "fuzz-smoke: $$t failed; full log in target/fuzz-$$t.log" >&2; \
	        exit 1; \
	    fi; \
	    grep -E '^Done [0-9]+ runs' "target/fuzz-$$t.log" | sed "s/^/fuzz-smoke: $$t: /"; \
	done

# Concurrent-access benchmark: prints a table and writes JSON and plots under bench-results/.
bench: build
	target/release/weft bench concurrent

clean:
	$(CARGO) clean
	rm -rf fuzz/target
