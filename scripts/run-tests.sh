#!/usr/bin/env bash
# `make test`: the board's tests beside the others, in two pytest processes.
#
# The virtual board runs single-threaded TCG, so its tests (marker vboard: boots, the five smoke
# studies) keep about one core busy and leave the other idle for most of their hour; the host's
# tests (everything else) fill that core. The baseline kernel build, which the board's tests all
# wait for and which keeps both cores busy, goes first and alone (tests/test_kernel_build.py).
# Each pytest has its own base temporary directory; the halves' lines are interleaved, prefixed
# [board] and [host]; the exit status is the first failing one's. Arguments go to every pytest
# (e.g. -x, -k EXPR).
set -uo pipefail
cd "$(dirname "$0")/.."
python=.venv/bin/python
base=$(mktemp -d "${TMPDIR:-/tmp}/lisa-ext-test.XXXXXX")
echo "test temporary directories: $base/build, $base/board, $base/host"

half() {  # NAME MARKER ARGS...: one pytest, its lines prefixed with NAME
    local name=$1 marker=$2
    shift 2
    "$python" -m pytest -m "$marker" --basetemp "$base/$name" "$@" 2>&1 | sed -u "s/^/[$name] /"
    return "${PIPESTATUS[0]}"
}

started=$SECONDS
first=tests/test_kernel_build.py
half build "vboard and not arm64" "$@" "$first"
build_rc=$?
echo "[build] finished after $(( (SECONDS - started) / 60 )) min, exit status $build_rc"
half board "vboard and not arm64" --ignore "$first" "$@" &
board_pid=$!
half host "not vboard and not arm64" --ignore "$first" "$@"
host_rc=$?
echo "[host] finished after $(( (SECONDS - started) / 60 )) min, exit status $host_rc"
wait "$board_pid"
board_rc=$?
echo "[board] finished after $(( (SECONDS - started) / 60 )) min, exit status $board_rc"
# pytest's 5 (nothing collected) is not a failure of a half that -k filtered empty
for rc in "$build_rc" "$host_rc" "$board_rc"; do
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then
        exit "$rc"
    fi
done
if [ "$build_rc" -eq 5 ] && [ "$host_rc" -eq 5 ] && [ "$board_rc" -eq 5 ]; then
    exit 5
fi
