#!/usr/bin/env bash
# `make run` ends here: start a local cluster and show Weft doing its main job:
# a file striped over the io servers and read back identical, the cache tier serving
# it from memory, and the same files through a mount.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="$PWD/target/release"
export PATH="$BIN:$PATH"
HOME_DIR="${WEFT_HOME:-$HOME/.weft}"
export WEFT_HOME="$HOME_DIR"

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "weft up: 1 metadata manager + 4 io servers with a cache manager each, on 127.0.0.1 (home $HOME_DIR)"
if weft status --home "$HOME_DIR" >/dev/null 2>&1; then
    echo "a cluster is already running there; using it"
elif [ -f "$HOME_DIR/cluster.toml" ]; then
    echo "a stopped cluster is there; starting it again as it was made"
    weft up --home "$HOME_DIR"
else
    weft up --home "$HOME_DIR" --cache colocated --cache-memory 512M
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
step "a 256 MiB local file of random data"
head -c $((256 << 20)) /dev/urandom >"$work/sample.bin"
sha256sum "$work/sample.bin" | cut -c1-64

step "weft put: striped in 64 KiB stripes over the io servers"
weft mkdir -p /demo
time WEFT_PROGRESS=1 weft put "$work/sample.bin" /demo/sample.bin
weft ls -l /demo
weft layout /demo/sample.bin

step "each io server holds a quarter of it"
weft df

step "the cache tier: new files are cached; the cache managers hold the blocks just written"
weft status --home "$HOME_DIR" | grep -E '^(server|[0-9])|cache \(' || true

step "weft get: read back from all servers at once"
time WEFT_PROGRESS=1 weft get /demo/sample.bin "$work/back.bin"
if cmp -s "$work/sample.bin" "$work/back.bin"; then
    echo "read back identical: $(sha256sum "$work/back.bin" | cut -c1-64)"
else
    echo "MISMATCH between the file stored and the file read back" >&2
    exit 1
fi

step "a directory with its own default layout (1 MiB stripes over 2 servers)"
weft mkdir -p /demo/wide
weft layout --set --stripe-size 1M --stripe-count 2 /demo/wide
weft put "$work/sample.bin" /demo/wide/
weft layout /demo/wide/sample.bin

step "POSIX access: weft mount (FUSE), then ordinary tools on the same files"
mnt="$work/mnt"
mkdir -p "$mnt"
if weft mount "$mnt"; then
    trap 'weft umount "$mnt" 2>/dev/null || true; rm -rf "$work"' EXIT
    ls -l "$mnt/demo"
    cp -r crates/weft-layout/src "$mnt/demo/source-copy"
    echo "cp -r of $(find crates/weft-layout/src -type f | wc -l) files into the mount; the native client sees them:"
    weft ls -l /demo/source-copy | head -5
    diff -r crates/weft-layout/src "$mnt/demo/source-copy" && echo "diff -r: identical"
    sha256sum "$mnt/demo/sample.bin" | cut -c1-64
    getfattr -n user.weft.layout "$mnt/demo/wide/sample.bin" 2>/dev/null || true
    weft umount "$mnt"
    trap 'rm -rf "$work"' EXIT
else
    echo "(weft mount is not possible here: it needs /dev/fuse; skipping this step)"
fi

step "the cluster keeps running (the cache lines count the reads served from memory)"
weft status --home "$HOME_DIR"
cat <<EOT

Try it yourself:
  export PATH="$BIN:\$PATH"
  weft --help            every command, with examples
  weft ls -l /demo       the files above
  weft cat /demo/...     file contents to stdout
  weft mount DIR         the file system for every program (weft umount DIR)
  weft down              stop the cluster (data is kept; weft up starts it again)
EOT
