#!/usr/bin/env bash
# Installs what building and testing Weft needs on Debian 12, and nothing that is
# already there: a machine with everything installed passes through in about a second.
# Sources: Debian's packages (apt) and crates.io (cargo install); nothing else.
set -euo pipefail

# Rust lives in ~/.cargo/bin under rustup, which a non-login shell may not have on PATH.
export PATH="$HOME/.cargo/bin:$PATH"

DEBIAN_PACKAGES=(
    build-essential      # cc/c++ for the C test programs and libFuzzer's C++ runtime
    pkg-config
    fuse3                # fusermount3, /etc/fuse.conf
    libfuse3-dev
    attr                 # getfattr / setfattr for the xattr tests
    openmpi-bin          # mpirun, mpicc
    libopenmpi-dev
    openssh-client       # Open MPI's launcher refuses to start, even on one host, without an rsh agent
    libhdf5-openmpi-dev  # parallel HDF5 on top of Weft's MPI-IO
    hdf5-tools           # h5dump, h5ls for checking files written through Weft
    python3
)
# Not mpich: it competes with Open MPI for the mpicc/mpirun alternatives.

RUST_VERSION_MIN=1.90  # keep equal to rust-version in the workspace Cargo.toml

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

check_rust() {
    command -v cargo >/dev/null && command -v rustc >/dev/null || die "cargo/rustc not found.
  Weft needs Rust >= $RUST_VERSION_MIN with rustfmt and clippy. Debian 12's own rustc is too old;
  install the stable toolchain with rustup (https://rustup.rs), then make sure ~/.cargo/bin is on PATH."
    local have
    have=$(rustc --version | awk '{print $2}')
    if [ "$(printf '%s\n%s\n' "$RUST_VERSION_MIN" "$have" | sort -V | head -n1)" != "$RUST_VERSION_MIN" ]; then
        die "rustc $have is older than $RUST_VERSION_MIN; update it with: rustup update stable"
    fi
    cargo fmt --version >/dev/null 2>&1 || die "rustfmt missing; add it with: rustup component add rustfmt"
    cargo clippy --version >/dev/null 2>&1 || die "clippy missing; add it with: rustup component add clippy"
    say "Rust: rustc $have with rustfmt and clippy"
}

install_cargo_fuzz() {
    if command -v cargo-fuzz >/dev/null; then
        say "cargo-fuzz: present"
        return
    fi
    say "installing cargo-fuzz from crates.io"
    cargo install cargo-fuzz --locked
}

install_debian_packages
check_rust
install_cargo_fuzz
