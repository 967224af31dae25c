#!/usr/bin/env bash
# `make test`: the suite in five pytest processes, laid out for two cores.
#
# The virtual board runs single-threaded TCG: a board keeps about one core busy, so two boards,
# or one board and the host's tests, fill the two cores. In order:
#
#   build   tests/test_kernel_build.py alone: the baseline kernel and the patched QEMU every
#           board test waits for, built on both cores
#   board   two studies at smoke size, the bisect test and the board's own checks, on the cache's board
#   host    every test without the vboard marker, beside `board`; then
#   board2  the other board tests and three smoke studies, on a second board beside `board`: its own cache
#           ($cache-board2, sharing the kernel, tool and QEMU builds and ccache) and SSH port
#   arm64   the arm64 board's tests (marker arm64; LISA_EXT_TEST_ARM64=0 leaves them out), once
#           `board` is done: its kernels are cross-built on the core `board` used, its own cache
#           ($cache-arm64, sharing the same builds) and SSH port, beside the end of `board2`
#
# Each pytest has its own base temporary directory and log ($base/NAME.log); lines are prefixed
# with the process's name, and a summary of what failed closes the output; the exit status is the
# first failing one's. Arguments go to every pytest (e.g. -x, -k EXPR).
set -uo pipefail
cd "$(dirname "$0")/.."
python=.venv/bin/python
base=$(mktemp -d "${TMPDIR:-/tmp}/lisa-ext-test.XXXXXX")
cache=${LISA_EXT_CACHE:-$HOME/.cache/lisa-ext}
second_cache=$cache-board2
second_port=${LISA_EXT_SECOND_BOARD_PORT:-10122}
arm64_cache=$cache-arm64
arm64_port=${LISA_EXT_ARM64_BOARD_PORT:-10222}
echo "test temporary directories: $base/{build,board,host,board2,arm64}"

build_tests=(tests/test_kernel_build.py)
board_tests=(tests/test_kernel_emulation.py tests/test_kernel_switches.py tests/test_studies_smoke.py
             tests/test_vboard_boot.py tests/test_vboard_workloads.py tests/test_bisect_board.py)
ignored=()
for t in "${build_tests[@]}" "${board_tests[@]}"; do
    [ "$t" = tests/test_studies_smoke.py ] || ignored+=(--ignore "$t")
done
# three smoke studies run on board2, so that both cores' lanes end together. From an empty cache
# (2699a12, 74.9 min): build 15.0; board 35.7 (iowait-boost 7.9, idle-gating 9.4, workloads 3.9,
# bisect 6.3) then arm64 22.3; host 26.7 then board2 31.8 (wq-affinity 7.2, ondemand-bursty 7.0,
# teo-util 5.2): both lanes ended at minute 73.
# tests/test_studies_smoke.py reads the split from LISA_EXT_TEST_SMOKE_STUDIES
second_board_smoke=teo-util,ondemand-bursty,wq-affinity

run() {  # NAME MARKER ARGS...: one pytest, its lines prefixed with NAME
    local name=$1 marker=$2
    shift 2
    "$python" -m pytest -m "$marker" --basetemp "$base/$name" "$@" 2>&1 \
        | tee "$base/$name.log" | sed -u "s/^/[$name] /"
    local rc=${PIPESTATUS[0]}
    echo "[$name] finished after $(( (SECONDS - started) / 60 )) min, exit status $rc"
    return "$rc"
}

board_cache() {  # CACHE: another board's cache, whose kernels, ccache, tools and QEMU builds are the first's
    mkdir -p "$1"
    for shared in kernels ccache tools qemu; do
        mkdir -p "$cache/$shared"
        [ -e "$1/$shared" ] || ln -s "$cache/$shared" "$1/$shared"
    done
}

started=$SECONDS
board_markers="vboard and not arm64 and not manual"  # manual: by hand (docs/sched-ext.md)
run build "$board_markers" "$@" "${build_tests[@]}"
build_rc=$?
board_then_arm64() {  # the first board's tests, then the arm64 board's on the core it freed
    LISA_EXT_TEST_SMOKE_STUDIES="-$second_board_smoke" run board "$board_markers" "$@" "${board_tests[@]}"
    echo $? >"$base/board.rc"
    if [ "${LISA_EXT_TEST_ARM64:-1}" != 0 ]; then
        board_cache "$arm64_cache"
        LISA_EXT_CACHE=$arm64_cache LISA_EXT_VBOARD_PORT=$arm64_port run arm64 arm64 "$@"
        echo $? >"$base/arm64.rc"
    else
        echo "[arm64] not run (LISA_EXT_TEST_ARM64=0)" | tee "$base/arm64.log"
        echo 5 >"$base/arm64.rc"
    fi
}
board_then_arm64 "$@" &
board_pid=$!
run host "not vboard and not arm64 and not manual" "$@"
host_rc=$?
board_cache "$second_cache"
LISA_EXT_CACHE=$second_cache LISA_EXT_VBOARD_PORT=$second_port LISA_EXT_TEST_SMOKE_STUDIES=$second_board_smoke \
    run board2 "$board_markers" "${ignored[@]}" "$@"
board2_rc=$?
wait "$board_pid"
board_rc=$(cat "$base/board.rc" 2>/dev/null || echo 1)  # no file: the subshell was killed
arm64_rc=$(cat "$base/arm64.rc" 2>/dev/null || echo 1)

# the five outputs interleave and CI shows only the tail: end with each process's verdict and
# what failed in it
echo "summary (exit status build $build_rc, board $board_rc, host $host_rc, board2 $board2_rc, arm64 $arm64_rc):"
for name in build board host board2 arm64; do
    grep -E '^(FAILED|ERROR) |^=+ .* in [0-9.]+s.* =+$' "$base/$name.log" \
        | sed "s/^/[$name] /"
done

# pytest's 5 (nothing collected) is not a failure: -k may leave a process nothing to run
all=("$build_rc" "$board_rc" "$host_rc" "$board2_rc" "$arm64_rc")
for rc in "${all[@]}"; do
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then
        exit "$rc"
    fi
done
[ "${all[*]}" = "5 5 5 5 5" ] && exit 5
exit 0
