"""Recipes of the inputs that crashed or exhausted the readers before the fuzzer ran (issue 20),
and one undamaged input per seed.

Each damages a seed the way the issue's inputs did, through the fuzzer's own operations
(mutations.py), so the regression corpus replays them on every ``make test``:

    .venv/bin/python tests/fuzz/known_recipes.py     # (re)writes tests/fuzz_corpus/known-* and seed-*

tests/test_trace_hostile.py builds the same damage directly, with assertions on the message.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mutations  # noqa: E402
import tracedat_files as tf  # noqa: E402

CORPUS = Path(__file__).resolve().parents[1] / "fuzz_corpus"


def _number(values: list, value) -> bytes:
    return bytes([values.index(value)])


def _format_path(seed: mutations.SeedData, event: str) -> tuple[int, bytes]:
    """(index of the event's format among the seed's formats, its text)."""
    v6 = tf.parse_v6(seed.data)
    formats = [p for p in mutations._texts(v6) if p[0] in ("ftrace", "systems")]
    for k, path in enumerate(formats):
        text = mutations._get(v6, path)
        if re.search(rb"^name: %s$" % event.encode(), text, re.M):
            return k, text
    raise LookupError(event)


def _number_index(text: bytes, before: bytes) -> int:
    """Index (among the text's runs of digits) of the first number after ``before``."""
    at = text.index(before) + len(before)
    return sum(1 for m in re.finditer(rb"\d+", text) if m.start() < at)


def known() -> dict[str, bytes]:
    seeds = {s.name: s for s in mutations.load_seeds()}
    huge = _number(mutations.NUMBERS, b"4294967292")
    out = {}
    # header_page: commit at offset 2^32 - 4 (commit_off + commit_size wrapped in 32 bits)
    header = tf.parse_v6(seeds["idle_v6"].data).header_page
    out["known-header-page-commit-offset"] = mutations.recipe(
        "idle_v6", [(12, 0, _number_index(header, b"local_t commit;\toffset:"), huge)])
    # sched_switch: common_type, common_pid at offset 2^32 - 4
    k, text = _format_path(seeds["idle_v6"], "sched_switch")
    for field in ("common_type", "common_pid"):
        out[f"known-{field.replace('_', '-')}-offset"] = mutations.recipe(
            "idle_v6", [(0, k, _number_index(text, field.encode() + b";\toffset:"), huge)])
    # sched_switch: one field line repeated 5000 times (thousands of overlapping fields)
    line = text[: text.index(b"prev_comm")].count(b"\n")
    out["known-overlapping-fields"] = mutations.recipe(
        "idle_v6", [(1, k, line, _number(mutations.DUPS, 5000))])
    # version 7: a chunk declaring 1000 MiB, and a chunk of 64 MiB of zeros (really inflating)
    layout = tf.Layout()
    tf.write_v7(tf.parse_v7(seeds["fio_v7_zstd"].data), layout)
    chunk = next(k for k, (_, _, what) in enumerate(layout.ints) if what == "chunk size")
    out["known-zstd-chunk-claims-1000-mib"] = mutations.recipe(
        "fio_v7_zstd", [(24, chunk, mutations.INTS.index(1000 << 20), b"")])
    out["known-zstd-chunk-inflates-64-mib"] = mutations.recipe(
        "fio_v7_zstd", [(23, 0, 0, _number(mutations.INFLATE, 16384))])
    # systrace: a zlib body inflating to 64 MiB
    out["known-systrace-zlib-bomb"] = mutations.recipe(
        "systrace_zlib_html", [(20, 0, 0, _number(mutations.DUPS, 20000))])
    # ftrace text: cpu 2^48 (ArrowInvalid), a 5000-digit pid (ValueError), seconds 10^30 (OverflowError)
    text = seeds["tracefs_txt"].data
    first = text.index(b"<...>-1701")
    for name, before, value in (("cpu", b"[", b"281474976710656"), ("pid", b"<...>-", b"9" * 5000),
                                ("timestamp", b"]    ", b"1" + b"0" * 30)):
        at = text.index(before, first) + len(before)
        index = sum(1 for m in re.finditer(rb"\d+", text) if m.start() < at)
        out[f"known-text-{name}-out-of-range"] = mutations.recipe(
            "tracefs_txt", [(0, 0, index, _number(mutations.NUMBERS, value))])
    # every seed, undamaged (an overwrite with nothing): the replay reaches each one
    for name in seeds:
        out[f"seed-{name}"] = mutations.recipe(name, [(25, 0, 0, b"")])
    return out


def main() -> int:
    for name, data in known().items():
        (CORPUS / name).write_bytes(data)
        print(f"{CORPUS / name}: {len(data)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
