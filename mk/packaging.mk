# Installing Weft the way sites do (see packaging/README.md):
#
#   make install [PREFIX=/usr/local] [DESTDIR=]  bin/weft, bin/weftd, lib/libweft.so, lib/libweft_posix.so,
#                       lib/libweft_mpiio.so (and _mpich), include/weft.h, lib/pkgconfig/weft.pc,
#                       lib/cmake/Weft/ (packaging/install.sh; the Spack recipe uses it too)
#   make deb            the Debian packages weft, libweft, libweft-dev,
#                       weft-mpiio-openmpi and weft-mpiio-mpich in target/debian/ (cargo-deb, from crates.io;
#                       installed by `scripts/install-deps.sh deb`)
#   make dist           the release tarball target/dist/weft-VERSION.tar.xz (+ .sha256): the sources
#                       of HEAD with every crate vendored, so it builds offline (scripts/dist.sh)
#   make dist-check     make dist, then build weft and weftd from the tarball with no network

PREFIX ?= /usr/local
DEB_DIR := $(or $(CARGO_TARGET_DIR),target)/debian
# Where cargo-deb finds the generated weft.pc and CMake files: under the release
# directory, whose target/release/ prefix cargo-deb maps to the real target directory.
DEB_STAGE := $(or $(CARGO_TARGET_DIR),target)/release/deb-stage

.PHONY: install deb deb-deps deb-packages dist dist-check

install: build
	packaging/install.sh --prefix "$(PREFIX)" $(if $(DESTDIR),--destdir "$(DESTDIR)")

deb-deps:
	scripts/install-deps.sh deb

deb: deb-deps build deb-packages

# The packages of the current build (no cargo build of its own): `make test` runs it
# after `build`, and tests/packages.rs in weft-tests installs what it made. --strip:
# the release profile keeps line tables for backtraces, which packages need not carry.
deb-packages:
	rm -rf "$(DEB_STAGE)" "$(DEB_DIR)"
	packaging/install.sh --prefix /usr --destdir "$(DEB_STAGE)" --dev-files-only
	$(CARGO) deb --no-build --strip --quiet -p weft-cli -o $(DEB_DIR)
	$(CARGO) deb --no-build --strip --quiet -p weft-capi -o $(DEB_DIR)
	$(CARGO) deb --no-build --quiet -p weft-capi --variant dev -o $(DEB_DIR)
	$(CARGO) deb --no-build --strip --quiet -p weft-mpiio -o $(DEB_DIR)
	$(CARGO) deb --no-build --strip --quiet -p weft-mpiio-mpich -o $(DEB_DIR)
	ls -l $(DEB_DIR)

dist:
	scripts/dist.sh

dist-check:
	scripts/dist.sh --check
