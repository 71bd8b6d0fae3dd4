# `make bench-noncontig`: the Clusterfile 2D CYCLIC(k) benchmark and the pack/unpack
# microbenchmark in one command from a fresh clone: builds, starts a throwaway local
# cluster (1 meta + 4 io servers, 64 KiB stripes), runs `weft bench noncontig` and
# `weft bench pack` (tables on stdout, JSON under bench-results/), and stops the
# cluster whatever happens. NONCONTIG_ARGS passes options, e.g. "--matrix-mib 64".

NONCONTIG_ARGS ?=

.PHONY: bench-noncontig
bench-noncontig: build
	home=$$(mktemp -d -t weft-bench-XXXXXX); \
	trap 'target/release/weft down --home "$$home" >/dev/null 2>&1 || true; rm -rf "$$home"' EXIT; \
	target/release/weft up --home "$$home"; \
	WEFT_HOME="$$home" target/release/weft bench noncontig $(NONCONTIG_ARGS); \
	target/release/weft bench pack
