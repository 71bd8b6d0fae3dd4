#!/usr/bin/env bash
# Installs a built Weft into a prefix, the one layout every way of installing shares
# (`make install`, the Spack recipe, and `make deb`, which stages the generated files):
#
#   PREFIX/bin/weft, PREFIX/bin/weftd
#   LIBDIR/libweft.so, LIBDIR/libweft_posix.so (weft run), LIBDIR/libweft_mpiio.so and PREFIX/bin/weft-delegate (when
#   built with MPI), INCLUDEDIR/weft.h
#   LIBDIR/pkgconfig/weft.pc, LIBDIR/cmake/Weft/WeftConfig.cmake (+ ConfigVersion)
#   PREFIX/lib/systemd/system/weftd@.service and weft.target, PREFIX/lib/sysusers.d/weft.conf
#   (servers as system services; see packaging/README.md), PREFIX/share/doc/weft/
#   (README.md, LICENSE, examples/cluster.toml, the guide's Markdown in docs/src/ where
#   README's links point), PREFIX/share/man/man1/ (weft.1.gz, a
#   page per subcommand such as weft-put.1.gz, weftd.1.gz: written by the built programs)
#
# Usage: packaging/install.sh --prefix DIR [--destdir DIR] [--libdir DIR]
#            [--includedir DIR] [--target-dir DIR] [--no-mpiio] [--dev-files-only]
#   --libdir, --includedir  default PREFIX/lib, PREFIX/include (both under PREFIX)
#   --destdir               staging root: files go to DESTDIR/PREFIX/..., and name PREFIX
#   --target-dir            where the release build is (default: $CARGO_TARGET_DIR/release,
#                           else target/release in the repository)
#   --no-mpiio              leave libweft_mpiio.so and weft-delegate out even if the
#                           target directory has them (from an earlier build with MPI)
#   --dev-files-only        only the generated files: weft.pc, the CMake files, the
#                           systemd units and the manual pages (for make deb)
# Build first: cargo build --release (the workspace, or weft-cli, weft-server, weft-capi
# and, for MPI-IO, weft-mpiio).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
say() { printf 'install: %s\n' "$*"; }
die() { printf 'install: error: %s\n' "$*" >&2; exit 1; }

prefix="" destdir="" libdir="" includedir="" target_dir="" dev_only=0 mpiio=1
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) prefix=${2:?}; shift 2 ;;
        --destdir) destdir=${2?}; shift 2 ;;
        --libdir) libdir=${2:?}; shift 2 ;;
        --includedir) includedir=${2:?}; shift 2 ;;
        --target-dir) target_dir=${2:?}; shift 2 ;;
        --no-mpiio) mpiio=0; shift ;;
        --dev-files-only) dev_only=1; shift ;;
        *) die "unknown argument $1 (see the comment at the top of $0)" ;;
    esac
done
[ -n "$prefix" ] || die "--prefix is required"
case "$prefix" in /*) ;; *) die "--prefix must be absolute: $prefix" ;; esac
prefix=${prefix%/}
libdir=${libdir:-$prefix/lib}
includedir=${includedir:-$prefix/include}
for dir in "$libdir" "$includedir"; do
    case "$dir/" in "$prefix"/*) ;; *) die "$dir is not under the prefix $prefix" ;; esac
done
target_dir=${target_dir:-${CARGO_TARGET_DIR:-$repo/target}/release}

# The workspace version, from [workspace.package] in Cargo.toml.
version=$(awk '/^\[workspace\.package\]/ {in_package = 1; next}
               /^\[/ {in_package = 0}
               in_package && $1 == "version" {gsub(/"/, "", $3); print $3; exit}' "$repo/Cargo.toml")
[ -n "$version" ] || die "no version in [workspace.package] of $repo/Cargo.toml"

cmake_dir="$libdir/cmake/Weft"
relative() { realpath -m --relative-to="$2" "$1"; }
fill() {  # template, output
    sed -e "s|@PREFIX@|$prefix|g" -e "s|@VERSION@|$version|g" \
        -e "s|@CMAKE_DIR_TO_PREFIX@|$(relative "$prefix" "$cmake_dir")|g" \
        -e "s|@LIBDIR_FROM_PREFIX@|$(relative "$libdir" "$prefix")|g" \
        -e "s|@INCLUDEDIR_FROM_PREFIX@|$(relative "$includedir" "$prefix")|g" \
        "$repo/packaging/templates/$1" >"$2"
    chmod 644 "$2"
}

mkdir -p "$destdir$libdir/pkgconfig" "$destdir$cmake_dir"
fill weft.pc.in "$destdir$libdir/pkgconfig/weft.pc"
fill WeftConfig.cmake.in "$destdir$cmake_dir/WeftConfig.cmake"
fill WeftConfigVersion.cmake.in "$destdir$cmake_dir/WeftConfigVersion.cmake"
# Service files: systemd looks in PREFIX/lib/systemd/system for /usr and /usr/local.
mkdir -p "$destdir$prefix/lib/systemd/system" "$destdir$prefix/lib/sysusers.d"
fill weftd@.service.in "$destdir$prefix/lib/systemd/system/weftd@.service"
fill weft.target.in "$destdir$prefix/lib/systemd/system/weft.target"
fill weft-sysusers.conf.in "$destdir$prefix/lib/sysusers.d/weft.conf"
for f in weft weftd; do
    [ -x "$target_dir/$f" ] || die "$target_dir/$f is missing: build first (cargo build --release --workspace)"
done
# Manual pages, from the programs' own clap definitions (crates/weft-man); gzip -n as
# Debian policy asks (no time stamp: the same build gives the same bytes).
man_dir="$destdir$prefix/share/man/man1"
rm -f "$man_dir"/weft.1.gz "$man_dir"/weft-*.1.gz "$man_dir"/weftd.1.gz
"$target_dir/weft" --generate-man-pages "$man_dir" >/dev/null
"$target_dir/weftd" --generate-man-pages "$man_dir" >/dev/null
for page in "$man_dir"/weft.1 "$man_dir"/weft-*.1 "$man_dir"/weftd.1; do
    chmod 644 "$page"
    gzip -9nf "$page"
done
if [ "$dev_only" = 1 ]; then
    say "weft.pc, WeftConfig.cmake, the systemd units and the manual pages for $prefix written under ${destdir:-/}"
    exit 0
fi

for f in libweft.so libweft_posix.so; do
    [ -f "$target_dir/$f" ] || die "$target_dir/$f is missing: build first (cargo build --release --workspace)"
done
install -d "$destdir$prefix/bin" "$destdir$includedir"
install -m 755 "$target_dir/weft" "$target_dir/weftd" "$destdir$prefix/bin/"
install -m 644 "$target_dir/libweft.so" "$destdir$libdir/"
# `weft run` preloads it from ../lib of the directory of weft (or $WEFT_POSIX_LIB).
install -m 644 "$target_dir/libweft_posix.so" "$destdir$libdir/"
install -m 644 "$repo/crates/weft-capi/include/weft.h" "$destdir$includedir/"
install -d "$destdir$prefix/share/doc/weft/examples"
install -m 644 "$repo/README.md" "$repo/LICENSE" "$destdir$prefix/share/doc/weft/"
install -d "$destdir$prefix/share/doc/weft/docs/src/internals"
install -m 644 "$repo"/docs/src/*.md "$destdir$prefix/share/doc/weft/docs/src/"
install -m 644 "$repo"/docs/src/internals/*.md "$destdir$prefix/share/doc/weft/docs/src/internals/"
install -m 644 "$repo/packaging/examples/cluster.toml" "$destdir$prefix/share/doc/weft/examples/"
if [ "$mpiio" = 0 ]; then
    say "MPI-IO left out (--no-mpiio)"
elif [ -f "$target_dir/libweft_mpiio.so" ]; then
    install -m 644 "$target_dir/libweft_mpiio.so" "$destdir$libdir/"
    # Job-scoped delegates: the library spawns it from ../bin of its own directory.
    [ -f "$target_dir/weft-delegate" ] || die "$target_dir/weft-delegate is missing: build weft-mpiio again"
    install -m 755 "$target_dir/weft-delegate" "$destdir$prefix/bin/"
else
    say "no libweft_mpiio.so in $target_dir (built without MPI): MPI-IO not installed"
fi
# The MPICH build (crates/weft-mpiio-mpich), when there is one.
if [ "$mpiio" = 1 ] && [ -f "$target_dir/libweft_mpiio_mpich.so" ]; then
    install -m 644 "$target_dir/libweft_mpiio_mpich.so" "$destdir$libdir/"
    [ -f "$target_dir/weft-delegate-mpich" ] || die "$target_dir/weft-delegate-mpich is missing: build weft-mpiio-mpich again"
    install -m 755 "$target_dir/weft-delegate-mpich" "$destdir$prefix/bin/"
fi
say "Weft $version installed in $destdir$prefix"
