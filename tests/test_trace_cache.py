"""The parquet trace cache: hits are served without decoding, changes are never stale.

"Served from the cache" is proven by making every reader fail on the second
load, not by timing it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

import lisa_ext.trace.read as trace_read
from lisa_ext.errors import UserError
from lisa_ext.report import cache as report_cache
from lisa_ext.trace import cache as trace_cache
from lisa_ext.trace import read_trace

from shared_traces import shared_trace


@pytest.fixture
def cache_root(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("LISA_EXT_CACHE", str(root))
    return root


@pytest.fixture
def no_decoding(monkeypatch):
    """After this fixture is used, any attempt to decode a trace file fails the test."""

    def forbid():
        def fail(*args, **kwargs):
            raise AssertionError(f"trace decoded again instead of read from the cache: {args[:1]}")

        monkeypatch.setattr(trace_read, "read_uncached", fail)

    return forbid


def _copy(rel: str, tmp_path: Path) -> Path:
    # a private copy that the test may modify (the shared traces are read-only)
    dst = tmp_path / Path(rel).name
    shutil.copyfile(shared_trace(rel), dst)
    return dst


def _same_tables(a, b):
    assert a.events == b.events
    for event in a.events:
        assert a[event].equals(b[event]), event


@pytest.mark.parametrize(
    "rel", ["public/lisa/sched_load_trace.dat", "public/lisa/lisa_tests_trace.txt", "public/trappy/trace_surfaceflinger.html"]
)
def test_second_read_is_served_from_cache(rel, tmp_path, cache_root, no_decoding):
    path = shared_trace(rel)
    first = read_trace(path)
    assert first.meta["cache"]["hit"] is False
    assert Path(first.meta["cache"]["directory"]).is_relative_to(cache_root)
    no_decoding()
    second = read_trace(path)
    assert second.meta["cache"]["hit"] is True
    _same_tables(first, second)
    for key in ("format", "cpus", "event_counts", "first_timestamp_ns", "last_timestamp_ns"):
        assert second.meta[key] == first.meta[key], key
    # a subset of events and a copy at another path are hits too: the key is the content
    sub = read_trace(_copy(rel, tmp_path), events=first.events[:1])
    assert sub.meta["cache"]["hit"] is True and sub.events == first.events[:1]
    with pytest.raises(UserError, match="no_such_event"):
        read_trace(path, events=["no_such_event"])


def test_changed_file_is_not_served_stale(tmp_path, cache_root):
    path = _copy("public/lisa/lisa_tests_trace.txt", tmp_path)
    before = read_trace(path)
    text = path.read_text()
    assert "next_comm=sshd next_pid=1639" in text
    path.write_text(text.replace("next_comm=sshd next_pid=1639", "next_comm=sshd next_pid=4242", 1))
    after = read_trace(path)
    assert after.meta["cache"]["hit"] is False
    assert after.meta["cache"]["key"] != before.meta["cache"]["key"]
    pids = after["sched_switch"].column("next_pid").to_pylist()
    assert 4242 in pids and 4242 not in before["sched_switch"].column("next_pid").to_pylist()


def test_load_trace_second_time_uses_cache(tmp_path, cache_root, no_decoding):
    from lisa_ext.trace import lisa_parser, load_trace

    path = shared_trace("public/lisa/trace_idle.dat")
    first = load_trace(path).df_event("cpu_idle")
    lisa_parser._PREPARED.clear()  # as in a new process
    no_decoding()
    second_trace = load_trace(path)
    second = second_trace.df_event("cpu_idle")
    # read back from LISA's swap inside the cache entry; its parquet round trip
    # turns the categories of __comm from the string dtype to object, as it does
    # for LISA's own parser
    assert Path(second_trace._cache.swap_dir).is_relative_to(cache_root)
    pd.testing.assert_frame_equal(first, second, check_categorical=False)


def test_a_trace_loaded_again_under_another_cache_root_is_cached_there(tmp_path, monkeypatch):
    """The parser keeps the last traces it prepared: not across a change of
    $LISA_EXT_CACHE, whose entry (and LISA's swap) a prepared trace points into."""
    from lisa_ext.trace import load_trace

    path = shared_trace("public/lisa/trace_idle.dat")
    for name in ("a", "b"):
        monkeypatch.setenv("LISA_EXT_CACHE", str(tmp_path / name))
        trace = load_trace(path)
        trace.df_event("cpu_idle")
        assert Path(trace._cache.swap_dir).is_relative_to(tmp_path / name)
        assert any((tmp_path / name / "traces").iterdir())


def test_damaged_entry_is_rebuilt(tmp_path, cache_root):
    path = shared_trace("public/lisa/trace_idle.dat")
    first = read_trace(path)
    entry = Path(first.meta["cache"]["directory"])
    victim = next((entry / "events").glob("*.parquet"))
    victim.write_bytes(victim.read_bytes()[:100])
    again = read_trace(path)
    assert again.meta["cache"]["hit"] is False
    _same_tables(first, again)
    assert read_trace(path).meta["cache"]["hit"] is True


def test_cache_location(monkeypatch, tmp_path):
    monkeypatch.setenv("LISA_EXT_CACHE", str(tmp_path / "elsewhere"))
    assert trace_cache.cache_dir() == tmp_path / "elsewhere" / "traces"  # the root, as everywhere
    monkeypatch.delenv("LISA_EXT_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert trace_cache.cache_dir() == tmp_path / "home" / ".cache" / "lisa-ext" / "traces"


def test_uncached_read_writes_nothing(tmp_path, cache_root):
    tables = read_trace(shared_trace("public/lisa/trace_idle.dat"), cache=False)
    assert "cpu_idle" in tables and "cache" not in tables.meta
    assert not cache_root.exists()


def test_a_file_is_hashed_once_per_process(tmp_path, cache_root, monkeypatch):
    """The trace cache and the report's caches key on one digest of the file, computed once
    (until the file changes); it used to be hashed by each of them on every lookup."""
    path = tmp_path / "t.dat"
    shutil.copyfile(shared_trace("local/fio_randread_2cpu_v7.dat"), path)
    opened = []
    real_open = open

    def counting_open(file, *args, **kwargs):
        if str(file) == str(path.resolve()):
            opened.append(file)
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(trace_cache, "open", counting_open, raising=False)
    trace_cache._DIGESTS.clear()
    keys = {trace_cache.content_key(path), trace_cache.content_key(path)}
    report_cache.trace_key(path)
    report_cache.load_findings(path)
    assert len(keys) == 1 and len(opened) == 1
    path.write_bytes(path.read_bytes()[:-1])  # changed: hashed again, another key
    assert trace_cache.content_key(path) not in keys and len(opened) == 2
