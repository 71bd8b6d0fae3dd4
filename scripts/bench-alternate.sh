#!/bin/sh
# Alternates `weft bench clusterfile` between two builds (old, new), ROUNDS times each
# (each build's own weft, weftd and libweft_mpiio.so: a release directory),
# so that the machine's load falls on both alike. Usage:
#   scripts/bench-alternate.sh OLD_RELEASE_DIR NEW_RELEASE_DIR OUT_DIR [ROUNDS] [-- extra bench args]
set -eu
old=$1 new=$2 out=$3 rounds=${4:-2}
shift 4 2>/dev/null || shift $#
[ "${1:-}" = "--" ] && shift
args=${*:-"--n 256 --k 32 --cyclic-n 512 --cms 1 --methods two_phase,independent --repeat 3"}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mkdir -p "$out"
i=1
while [ "$i" -le "$rounds" ]; do
    for which in old new; do
        eval dir=\$$which
        echo "== round $i: $which ($dir) $(date -u +%T)"
        # shellcheck disable=SC2086
        "$dir/weft" bench clusterfile $args --json "$out/$which-$i.json" --svg "$out/$which-$i.svg" \
            >"$out/$which-$i.out" 2>&1 || echo "   failed: see $out/$which-$i.out"
    done
    i=$((i + 1))
done
