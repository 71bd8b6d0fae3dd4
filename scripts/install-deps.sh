#!/usr/bin/env bash
# Installs what building and testing Weft needs on Debian 12, and nothing that is
# already there: a machine with everything installed passes through in about a second.
# Sources: Debian's packages (apt), the Rust project's rustup (the stable toolchain,
# only when no suitable one is found) and crates.io (cargo install); nothing else.
#
#   scripts/install-deps.sh          what `make build`, `make run` and `make test` need
#   scripts/install-deps.sh deb      that, and cargo-deb for `make deb`
set -euo pipefail

# rustup installs into $CARGO_HOME/bin (default ~/.cargo/bin), which a non-login shell
# may not have on PATH.
CARGO_BIN="${CARGO_HOME:-$HOME/.cargo}/bin"
export PATH="$CARGO_BIN:$PATH"

DEBIAN_PACKAGES=(
    build-essential      # cc/c++ for the C test programs and libFuzzer's C++ runtime
    pkg-config
    cmake                # the packaging test builds a C program with find_package(Weft)
    fuse3                # fusermount3, /etc/fuse.conf
    libfuse3-dev
    attr                 # getfattr / setfattr for the xattr tests
    openmpi-bin          # mpirun, mpicc
    libopenmpi-dev
    gfortran             # mpif90: the Fortran MPI-IO test program (PMPI_File_* path)
    openssh-client       # Open MPI's launcher refuses to start, even on one host, without an rsh agent
    mpich                # mpicc.mpich, mpirun.mpich: libweft_mpiio_mpich.so (crates/weft-mpiio-mpich) and its tests
    libmpich-dev
    libhdf5-openmpi-dev  # parallel HDF5 on top of Weft's MPI-IO
    libpnetcdf-dev       # PnetCDF (built with Open MPI) on a mount path and on weft: (weft-fuse's mpiio_native test)
    xz-utils             # unpacks PnetCDF's source package (apt-get source) for its own tests on weft: names (weft-mpiio's pnetcdf test)
    munge                # munged, munge, unmunge, mungekey: `identity = "munge"` and its test (crates/weft-tests/tests/munge.rs)
    hdf5-tools           # h5dump, h5ls for checking files written through Weft
    librsvg2-bin         # rsvg-convert: weft-bench's tests render every benchmark's SVG
    fio                  # scripts/bench-small-io.sh: random 4 KiB reads and writes through a mount (benchmark only)
    python3
    python3-prometheus-client  # the reference OpenMetrics parser the metrics tests check the endpoint with
    chromium             # a real headless browser for the status page test
    systemd              # systemd-analyze verify and systemd-sysusers: the packaging test checks the weftd@ units and the service user
    groff-base           # groff: the packaging test renders every manual page with warnings on
    iproute2             # ip, tc: `weft up --emulate-network` (namespaces, veth links, tbf) and its test
    curl                 # fetches rustup when no suitable Rust is installed
    ca-certificates      # ... over https
)
# MPICH and Open MPI both provide the mpicc/mpirun alternatives (Debian's `mpi` and
# `mpirun`); Open MPI's have the higher priority and stay the default (keep_openmpi_default
# puts them back if they were changed by hand). Builds and tests that want one MPI
# name it: mpicc.openmpi / mpirun.openmpi, mpicc.mpich / mpirun.mpich.

RUST_VERSION_MIN=1.90  # keep equal to rust-version in the workspace Cargo.toml
# rustup's installer script (what https://sh.rustup.rs serves), from the Rust project.
RUSTUP_INIT_URL=https://static.rust-lang.org/rustup/rustup-init.sh
CARGO_DEB_VERSION=3.8.0  # `make deb`; pinned so that every machine builds the same packages
FSX_VERSION=0.3.2  # fsx-rs, the file system exerciser weft-fuse's cached_fsx test runs (xfstests' C fsx is not in Debian)
# mdBook, which builds the guide in docs/ (`make docs`, part of `make test`); not in Debian 12.
# Built without its default `serve` and `watch` features (a web server with tokio, and a
# file watcher: nothing the build uses). Measured: 13 min on a 2-core machine loaded with
# other builds (load 11), 2 min 55 s of CPU; once, then `mdbook --version` finds it.
MDBOOK_VERSION=0.5.4

say() { printf 'install-deps: %s\n' "$*"; }
die() { printf 'install-deps: error: %s\n' "$*" >&2; exit 1; }

is_installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q '^install ok installed$'
}

install_debian_packages() {
    command -v dpkg-query >/dev/null || die "dpkg-query not found: this script supports Debian 12 only"
    local missing=() p
    for p in "${DEBIAN_PACKAGES[@]}"; do
        is_installed "$p" || missing+=("$p")
    done
    if [ ${#missing[@]} -eq 0 ]; then
        say "Debian packages: all present"
        return
    fi
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null ||
            die "missing Debian packages (${missing[*]}); run this script as root or install sudo"
        sudo=(sudo)
    fi
    say "installing Debian packages: ${missing[*]}"
    "${sudo[@]}" apt-get update -q
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q -o Dpkg::Use-Pty=0 "${missing[@]}" </dev/null
}

# The mpicc/mpirun alternatives back to Open MPI if something set them to MPICH.
keep_openmpi_default() {
    command -v update-alternatives >/dev/null || return 0
    local pair group link target
    for pair in mpi:/usr/bin/mpicc mpirun:/usr/bin/mpirun; do
        group=${pair%%:*} link=${pair#*:}
        target=$link.openmpi
        [ -e "$target" ] || continue
        [ "$(readlink -f "$link")" = "$(readlink -f "$target")" ] && continue
        if [ "$(id -u)" -ne 0 ]; then
            say "warning: $link is not Open MPI's; run: sudo update-alternatives --set $group $target"
            continue
        fi
        say "update-alternatives: $group back to Open MPI ($target)"
        update-alternatives --quiet --set "$group" "$target"
    done
}

# Why the Rust on PATH will not do, or nothing when it will.
rust_shortfall() {
    command -v cargo >/dev/null && command -v rustc >/dev/null || { echo "no cargo/rustc on PATH"; return; }
    local have
    have=$(rustc --version | awk '{print $2}')
    if [ "$(printf '%s\n%s\n' "$RUST_VERSION_MIN" "$have" | sort -V | head -n1)" != "$RUST_VERSION_MIN" ]; then
        echo "rustc $have is older than $RUST_VERSION_MIN"
        return
    fi
    cargo fmt --version >/dev/null 2>&1 || { echo "rustfmt is missing"; return; }
    cargo clippy --version >/dev/null 2>&1 || { echo "clippy is missing"; return; }
}

# The stable toolchain with rustfmt and clippy, for the current user, through rustup:
# installed when there is no rustup, updated when rustup has too old a stable. A
# toolchain the user chose (rustup default other than stable) is not changed.
install_rust() {
    local why=$1
    if command -v rustup >/dev/null; then
        local active
        active=$(rustup show active-toolchain 2>/dev/null | awk '{print $1}')
        case "$active" in
            stable-* | "")
                say "$why; updating the stable toolchain with rustup"
                rustup toolchain install stable --profile minimal --component rustfmt --component clippy
                rustup default stable
                ;;
            *)
                die "$why (the active rustup toolchain is $active).
  Weft needs Rust >= $RUST_VERSION_MIN with rustfmt and clippy: run
  rustup toolchain install stable --component rustfmt --component clippy && rustup default stable" ;;
        esac
        return
    fi
    say "$why; installing the stable Rust toolchain with rustup into ${CARGO_HOME:-$HOME/.cargo} (for $(id -un))"
    command -v curl >/dev/null || die "curl is missing (it is in DEBIAN_PACKAGES: did apt-get fail?)"
    local init
    init=$(mktemp -t rustup-init-XXXXXX.sh)
    curl --proto '=https' --tlsv1.2 -sSf --retry 3 -o "$init" "$RUSTUP_INIT_URL" ||
        { rm -f "$init"; die "cannot download rustup from $RUSTUP_INIT_URL"; }
    # -y: no questions; --no-modify-path: leave the user's shell files alone (make and
    # this script put $CARGO_HOME/bin on PATH themselves).
    sh "$init" -y --no-modify-path --profile minimal --default-toolchain stable \
        --component rustfmt --component clippy </dev/null ||
        { rm -f "$init"; die "rustup-init failed"; }
    rm -f "$init"
    say "Rust installed; for your own shell: export PATH=\"$CARGO_BIN:\$PATH\""
}

ensure_rust() {
    local why
    why=$(rust_shortfall)
    if [ -n "$why" ]; then
        install_rust "$why"
        hash -r
        why=$(rust_shortfall)
        [ -z "$why" ] || die "still no suitable Rust after installing it: $why"
    fi
    say "Rust: $(rustc --version | awk '{print $1, $2}') with rustfmt and clippy"
}

install_cargo_fuzz() {
    if command -v cargo-fuzz >/dev/null; then
        say "cargo-fuzz: present"
        return
    fi
    say "installing cargo-fuzz from crates.io"
    cargo install cargo-fuzz --locked
}

install_fsx() {
    if command -v fsx >/dev/null && [ "$(fsx --version 2>/dev/null | awk '{print $NF}')" = "$FSX_VERSION" ]; then
        say "fsx $FSX_VERSION: present"
        return
    fi
    say "installing fsx $FSX_VERSION from crates.io (weft-fuse's cached_fsx test)"
    cargo install fsx --version "$FSX_VERSION" --locked
}

install_mdbook() {
    if command -v mdbook >/dev/null && [ "$(mdbook --version 2>/dev/null | awk '{print $NF}')" = "v$MDBOOK_VERSION" ]; then
        say "mdbook $MDBOOK_VERSION: present"
        return
    fi
    say "installing mdbook $MDBOOK_VERSION from crates.io (the guide in docs/)"
    cargo install mdbook --version "$MDBOOK_VERSION" --locked --no-default-features --features search
}

install_cargo_deb() {
    if command -v cargo-deb >/dev/null && [ "$(cargo-deb --version 2>/dev/null | awk '{print $NF}')" = "$CARGO_DEB_VERSION" ]; then
        say "cargo-deb $CARGO_DEB_VERSION: present"
        return
    fi
    say "installing cargo-deb $CARGO_DEB_VERSION from crates.io (for make deb)"
    cargo install cargo-deb --version "$CARGO_DEB_VERSION" --locked
}

install_debian_packages
keep_openmpi_default
ensure_rust
install_cargo_fuzz
install_fsx
install_mdbook
case "${1:-}" in
    "") ;;
    deb) install_cargo_deb ;;
    *) die "unknown argument ${1}: expected nothing or deb" ;;
esac
