# The C programs of weft-capi, built by `make build` after the workspace (BUILD_EXTRA):
# they include crates/weft-capi/include/weft.h and link target/release/libweft.so,
# which they find at run time through an rpath relative to themselves ($ORIGIN/..), so
# target/release/c/<program> runs from anywhere without LD_LIBRARY_PATH.

CAPI_DIR := crates/weft-capi
CAPI_LIB_DIR := target/release
CAPI_OUT := $(CAPI_LIB_DIR)/c
CAPI_PROGRAMS := $(patsubst $(CAPI_DIR)/c/%.c,$(CAPI_OUT)/%,$(wildcard $(CAPI_DIR)/c/*.c))
# C99 and pedantic: the header promises no more than that of its users.
CAPI_CFLAGS := -std=c99 -pedantic -Wall -Wextra -Werror -O2 -g -I$(CAPI_DIR)/include

BUILD_EXTRA += capi-c-tests

.PHONY: capi-c-tests
capi-c-tests: $(CAPI_PROGRAMS)

$(CAPI_OUT)/%: $(CAPI_DIR)/c/%.c $(CAPI_DIR)/include/weft.h $(CAPI_LIB_DIR)/libweft.so
	mkdir -p $(CAPI_OUT)
	$(CC) $(CAPI_CFLAGS) -o $@ $< -L$(CAPI_LIB_DIR) -lweft -Wl,-rpath,'$$ORIGIN/..'

$(CAPI_LIB_DIR)/libweft.so:
	@echo "$@ is missing: build the workspace first (cargo build --release --workspace)" >&2; exit 1
