#!/usr/bin/env bash
# Adds up the "test result:" lines of a `cargo test` log into one closing line, so that
# the totals for the whole workspace end the output of `make test` (after the fuzz run,
# and rather than the last crate's doc-tests, which often run none). Fails when no test ran.
set -euo pipefail

log=${1:?usage: test-summary.sh CARGO_TEST_LOG}
read -r passed failed ignored < <(
    sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed; \([0-9]*\) ignored;.*/\1 \2 \3/p' "$log" |
        awk '{p += $1; f += $2; i += $3} END {print p + 0, f + 0, i + 0}'
)
if [ "$passed" -eq 0 ] && [ "$failed" -eq 0 ]; then
    echo "test-summary: no test ran (no 'test result:' line with a test in $log)" >&2
    exit 1
fi
echo "tests: $passed passed, $failed failed, $ignored skipped"
[ "$failed" -eq 0 ]
