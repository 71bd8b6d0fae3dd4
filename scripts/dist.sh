#!/usr/bin/env bash
# `make dist`: the release tarball, target/dist/weft-VERSION.tar.xz, and its SHA-256 in
# weft-VERSION.tar.xz.sha256. It holds the sources of HEAD (git archive: only committed
# files), every crate they depend on (cargo vendor, from Cargo.lock, in vendor/), a
# .cargo/config.toml that builds from vendor/ only, and GIT_REVISION (what
# `weft --version` names, as a checkout would). So it builds with no network:
#
#   tar xf weft-0.1.0.tar.xz && cd weft-0.1.0 && cargo build --release --offline
#
# (`make install PREFIX=...` from the unpacked directory works offline too once the
# Debian packages are installed; the Spack recipe builds such a tarball.)
#
# Usage: scripts/dist.sh [--check]
#   --check   then unpack the tarball in a scratch directory and build weft and weftd from
#             it offline, inside a network namespace with no interfaces when `unshare`
#             allows (root), and run both --version: what `make test` does (make dist-check).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
say() { printf 'dist: %s\n' "$*"; }
die() { printf 'dist: error: %s\n' "$*" >&2; exit 1; }

check=0
case "${1-}" in
    "") ;;
    --check) check=1 ;;
    *) die "unknown argument $1 (usage: scripts/dist.sh [--check])" ;;
esac

cd "$repo"
version=$(awk '/^\[workspace\.package\]/ {in_package = 1; next}
               /^\[/ {in_package = 0}
               in_package && $1 == "version" {gsub(/"/, "", $3); print $3; exit}' Cargo.toml)
[ -n "$version" ] || die "no version in [workspace.package] of Cargo.toml"
git rev-parse --verify -q HEAD >/dev/null || die "$repo is not a git checkout with a commit"
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
    say "note: uncommitted changes are not in the tarball (it is made from HEAD)"
fi
revision=$(git rev-parse --short HEAD)
name="weft-$version"
out="${CARGO_TARGET_DIR:-$repo/target}/dist"
stage=$(mktemp -d "${TMPDIR:-/tmp}/weft-dist-XXXXXX")
trap 'rm -rf "$stage"' EXIT

say "sources of $revision"
git archive --format=tar --prefix="$name/" HEAD | tar -x -C "$stage"
printf '%s\n' "$revision" >"$stage/$name/GIT_REVISION"

say "vendoring the crates of Cargo.lock (cargo vendor)"
# --locked: exactly the versions of Cargo.lock; the config it prints is written below,
# with a relative directory so the unpacked tarball can live anywhere.
(cd "$stage/$name" && cargo vendor --locked --versioned-dirs --quiet vendor >/dev/null)
mkdir -p "$stage/$name/.cargo"
cat >"$stage/$name/.cargo/config.toml" <<'CONFIG'
# Written by scripts/dist.sh: this tarball builds from vendor/ only (no network).
[source.crates-io]
replace-with = "vendored-sources"

[source.vendored-sources]
directory = "vendor"
CONFIG

mkdir -p "$out"
tarball="$out/$name.tar.xz"
say "writing $tarball"
# Same bytes for the same commit: sorted names, fixed owner and time.
tar --sort=name --owner=0 --group=0 --numeric-owner \
    --mtime="@$(git log -1 --format=%ct HEAD)" \
    -C "$stage" -cf - "$name" | xz -T0 -6 >"$tarball.part"
mv "$tarball.part" "$tarball"
(cd "$out" && sha256sum "$name.tar.xz" >"$name.tar.xz.sha256")
say "$(cut -d' ' -f1 "$out/$name.tar.xz.sha256")  $name.tar.xz ($(du -h "$tarball" | cut -f1))"

[ "$check" = 1 ] || exit 0

say "check: building weft and weftd from the tarball, offline"
build=$(mktemp -d "${TMPDIR:-/tmp}/weft-dist-check-XXXXXX")
trap 'rm -rf "$stage" "$build"' EXIT
tar -xJf "$tarball" -C "$build"
cd "$build/$name"
# No network at all when we may make a namespace (root in CI); --offline either way.
isolate=()
if unshare -n true 2>/dev/null; then
    isolate=(unshare -n)
    say "check: in a network namespace with no interfaces (unshare -n)"
fi
# A fresh target directory and none of the environment of an outer cargo (make test
# runs this from the repository, whose target must not be used).
# The dev profile without optimisation or debug info: the check is that everything
# needed is in the tarball, and this builds in about half the time of --release.
env -u CARGO_TARGET_DIR -u RUSTFLAGS -u CARGO_BUILD_TARGET_DIR \
    "${isolate[@]}" cargo build --offline --locked -p weft-cli -p weft-server \
    --config 'profile.dev.opt-level=0' --config 'profile.dev.package."*".opt-level=0' \
    --config 'profile.dev.debug=0'
for program in weft weftd; do
    got=$("target/debug/$program" --version)
    case "$got" in
        "$program $version (git $revision)") say "check: $got" ;;
        *) die "the tarball's $program says \"$got\", not \"$program $version (git $revision)\"" ;;
    esac
done
say "check: the tarball builds offline"
