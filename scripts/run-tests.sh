#!/usr/bin/env bash
# `make test`: the board's tests beside the others, in two pytest processes.
#
# The virtual board runs single-threaded TCG, so its tests (marker vboard: kernel builds, boots,
# the five smoke studies) keep about one core busy and leave the other idle for most of their
# hour; the host's tests (everything else) fill that core. Each half has its own base temporary
# directory; their lines are interleaved, prefixed [board] and [host]; the exit status is the
# first failing half's. Arguments go to both pytest processes (e.g. -x, -k EXPR).
set -uo pipefail
cd "$(dirname "$0")/.."
python=.venv/bin/python
base=$(mktemp -d "${TMPDIR:-/tmp}/lisa-ext-test.XXXXXX")
echo "test temporary directories: $base/board, $base/host"

half() {  # NAME MARKER ARGS...: one pytest, its lines prefixed with NAME
    local name=$1 marker=$2
    shift 2
    "$python" -m pytest -m "$marker" --basetemp "$base/$name" "$@" 2>&1 | sed -u "s/^/[$name] /"
    return "${PIPESTATUS[0]}"
}

started=$SECONDS
half board "vboard and not arm64" "$@" &
board_pid=$!
half host "not vboard and not arm64" "$@"
host_rc=$?
echo "[host] finished after $(( (SECONDS - started) / 60 )) min, exit status $host_rc"
wait "$board_pid"
board_rc=$?
echo "[board] finished after $(( (SECONDS - started) / 60 )) min, exit status $board_rc"
# pytest's 5 (nothing collected) is not a failure of a half that -k filtered empty
for rc in "$host_rc" "$board_rc"; do
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then
        exit "$rc"
    fi
done
if [ "$host_rc" -eq 5 ] && [ "$board_rc" -eq 5 ]; then
    exit 5
fi
