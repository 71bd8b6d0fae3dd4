#!/usr/bin/env bash
# Small I/O through a mount against a local directory, fio style (issue 8 item 4):
# random 4 KiB writes to new files (first writes), the same again over the files just
# written (rewrites), random 4 KiB reads (cold: each file's page cache dropped first),
# and the reads again with the page cache kept (warm: a first unmeasured pass fills it;
# through the mount this is close-to-open with kept pages), each by 4 jobs (one file each, psync);
# optionally a tar extraction of a tree. The directories are measured in turn, round
# after round, and each figure is the median of the rounds, with its ratio to the first
# directory (the baseline, normally a local one).
#
# Usage: scripts/bench-small-io.sh [--runs N] [--size BYTES] [--tar FILE.tar] LABEL=DIR...
# Example:
#   weft mount /mnt/weft && mkdir -p /tmp/local /mnt/weft/small
#   scripts/bench-small-io.sh --runs 3 --tar /tmp/doc.tar local=/tmp/local mount=/mnt/weft/small
#
# The FUSE floor (a file system that stores no data, on the mount's FUSE library and
# settings) shows what the mount's FUSE path allows here: `weft bench floor --mountpoint /tmp/floor &`,
# then add floor=/tmp/floor to the directories.
# Notes: fio's default invalidate=1 drops each file's page cache before a job, so reads
# on the local side come from the disk (and through the mount, from the io servers).
# Fresh page-cache pages are slow to fault in on some virtual machines, which is why
# first writes and rewrites are reported apart. Needs fio (make deps installs it).
set -euo pipefail

runs=3
size=32m
tarball=
dirs=()
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) runs=$2; shift 2 ;;
        --size) size=$2; shift 2 ;;
        --tar) tarball=$2; shift 2 ;;
        -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
        *=*) dirs+=("$1"); shift ;;
        *) echo "bench-small-io: unexpected argument $1 (LABEL=DIR expected)" >&2; exit 2 ;;
    esac
done
[ ${#dirs[@]} -ge 1 ] || { echo "bench-small-io: give at least one LABEL=DIR" >&2; exit 2; }
command -v fio >/dev/null || { echo "bench-small-io: fio is not installed (make deps)" >&2; exit 2; }
for d in "${dirs[@]}"; do
    [ -d "${d#*=}" ] || { echo "bench-small-io: ${d#*=} is not a directory" >&2; exit 2; }
done

results=$(mktemp)
trap 'rm -f "$results"' EXIT

# fio MODE DIR [FIO ARGS...]: prints the IOPS of one job group.
fio_iops() {
    local mode=$1 dir=$2 out field
    shift 2
    out=$(fio --name=small --directory="$dir" --rw="$mode" --bs=4k --size="$size" --numjobs=4 \
        --ioengine=psync --fallocate=none --group_reporting --output-format=terse --terse-version=3 "$@")
    # Terse v3: field 8 is read IOPS, field 49 write IOPS.
    if [ "$mode" = randread ]; then field=8; else field=49; fi
    echo "$out" | tail -1 | cut -d';' -f"$field"
}

now() { date +%s.%N; }

for round in $(seq 1 "$runs"); do
    for d in "${dirs[@]}"; do
        label=${d%%=*} dir=${d#*=}
        rm -f "$dir"/small.*
        echo "$label first-write $(fio_iops randwrite "$dir")" >>"$results"
        echo "$label rewrite $(fio_iops randwrite "$dir")" >>"$results"
        echo "$label read $(fio_iops randread "$dir")" >>"$results"
        # The mount keeps a file's pages only once its objects' stamps settled (1 s).
        sleep 1.2
        fio_iops randread "$dir" --invalidate=0 >/dev/null
        echo "$label warm-read $(fio_iops randread "$dir" --invalidate=0)" >>"$results"
        rm -f "$dir"/small.*
        if [ -n "$tarball" ]; then
            rm -rf "$dir/tar-tree"; mkdir "$dir/tar-tree"
            start=$(now); tar xf "$tarball" -C "$dir/tar-tree"; end=$(now)
            # Entries per second, so that higher is better as for the others.
            entries=$(tar tf "$tarball" | wc -l)
            echo "$label tar $(echo "$entries / ($end - $start)" | bc -l)" >>"$results"
            rm -rf "$dir/tar-tree"
        fi
        echo "round $round: $label done" >&2
    done
done

base=${dirs[0]%%=*}
printf '%-10s %-12s %12s %8s   %s\n' dir test median "vs $base" "runs"
for test in first-write rewrite read warm-read tar; do
    for d in "${dirs[@]}"; do
        label=${d%%=*}
        values=$(awk -v l="$label" -v t="$test" '$1 == l && $2 == t { print $3 }' "$results" | sort -g)
        [ -n "$values" ] || continue
        median=$(echo "$values" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
        base_values=$(awk -v l="$base" -v t="$test" '$1 == l && $2 == t { print $3 }' "$results" | sort -g)
        base_median=$(echo "$base_values" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
        ratio=$(echo "$median / $base_median" | bc -l)
        unit=IOPS; [ "$test" = tar ] && unit=entries/s
        printf '%-10s %-12s %12.0f %8.2f   %s (%s)\n' "$label" "$test" "$median" "$ratio" "$(echo $values | tr '\n' ' ')" "$unit"
    done
done
