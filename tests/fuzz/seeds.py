"""Small real seed traces for the fuzzer, made from the shared traces.

The shared trace.dat files weigh 2-7 MB each, mostly the target's kallsyms and
the formats of a thousand events the recording never enabled. Fuzzing them as
they are costs seconds per input. Each seed here keeps a few pages of real
ring-buffer data per CPU (byte for byte), the formats of the events those pages
hold plus one format of each field kind the source has (``__data_loc``,
``__rel_loc``, arrays, flexible arrays, pointers...), the printk formats, the
saved cmdlines and only the kallsyms entries the events resolve to, and is
written back as trace.dat version 6 (the layout of ``man 5 trace-cmd.dat.v6``).
Version 7 copies come from ``trace-cmd convert`` (zstd and none; trace-cmd
writes the same bytes every time); a zlib copy is the zstd one with every
compressed section and chunk re-packed with zlib, since Debian's trace-cmd
writes no zlib. Text seeds are the first lines of the shared text traces, a
``trace-cmd report`` (and ``-R``) of a seed, and systrace pages holding a
slice of the shared page's ftrace text as plain and as zlib+base64 text.

Seeds are rebuilt when missing, in ``$LISA_EXT_FUZZ_SEEDS`` (default
``$LISA_EXT_CACHE/fuzz-seeds``, ``~/.cache/lisa-ext/fuzz-seeds``);
``SEEDS_SHA256`` pins what each one must hold, so a fuzzer input (a recipe
applied to a seed, see ``mutations.py``) means the same file everywhere.

    .venv/bin/python tests/fuzz/seeds.py     # build them and print their sizes and digests
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import subprocess
import sys
import zlib
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tracedat_files import V6, parse_v6, parse_v7, write_v6, write_v7  # noqa: E402  (a sibling, not a package)

__all__ = ["SEEDS", "SEEDS_SHA256", "Seed", "seed_dir", "seed_paths"]

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "traces"


def seed_dir() -> Path:
    if os.environ.get("LISA_EXT_FUZZ_SEEDS"):
        return Path(os.environ["LISA_EXT_FUZZ_SEEDS"])
    cache = os.environ.get("LISA_EXT_CACHE") or Path.home() / ".cache" / "lisa-ext"
    return Path(cache) / "fuzz-seeds"


_NAME = re.compile(rb"^name:\s*(\S+)", re.M)
_FIELD_KINDS = {  # one format of each kind is kept, besides the events that have records
    "data_loc_char": rb"field:__data_loc char\[\]",
    "data_loc_array": rb"field:__data_loc (?!char)[^;]*\[\]",
    "rel_loc": rb"field:__rel_loc",
    "char_array": rb"field:char \w+\[\d+\]",
    "int_array": rb"field:(?:unsigned )?(?:int|long|u32|u64|s32) \w+\[\d+\]",
    "flexible": rb"field:[^;]*\w+\[\];[^\n]*size:0;",
    "pointer": rb"field:[^;]*\*",
    "long": rb"field:(?:unsigned )?long \w+;",
    "bool": rb"field:bool ",
    "symbol": rb"print fmt:.*%p[sSfF]",
}


def _event_name(text: bytes) -> str:
    m = _NAME.search(text)
    return m[1].decode() if m else ""


def _keep_formats(v6: V6, recorded: set[str]) -> V6:
    kinds_left = dict(_FIELD_KINDS)

    def keep(text: bytes) -> bool:
        if _event_name(text) in recorded:
            return True
        for kind, pattern in list(kinds_left.items()):
            if re.search(pattern, text):
                del kinds_left[kind]
                return True
        return False

    systems = [(name, [f for f in formats if keep(f)]) for name, formats in v6.systems]
    return replace(v6, ftrace=[f for f in v6.ftrace if keep(f) or _event_name(f) in ("print", "bprint")],
                   systems=[(name, formats) for name, formats in systems if formats])


def _kept_kallsyms(v6_path: Path, v6: V6) -> bytes:
    sys.path.insert(0, str(REPO))
    from lisa_ext.trace.strip import used_symbols

    keep = used_symbols(v6_path)
    lines = [line for line in v6.kallsyms.split(b"\n") if len(line.split()) >= 3 and line.split()[2].decode() in keep]
    # trace-cmd convert cannot write an empty kallsyms section: keep the first symbol then
    return b"".join(line + b"\n" for line in lines or v6.kallsyms.split(b"\n")[:1])


# --------------------------------------------------------------------------
# The seeds


@dataclass(frozen=True)
class Seed:
    name: str
    kind: str  # "tracedat" or "text"
    build: tuple  # how (see _build)


_V6_SOURCES = {
    # name: (shared file, pages kept per CPU)
    "idle_v6": ("public/lisa/trace_idle.dat", 1),
    "raw_v6": ("public/lisa/raw_trace.dat", 1),
    "arm32_v6": ("public/lisa/tests_trace_2019.dat", 1),
    "hmp32_v6": ("public/lisa/tests_trace_2014.dat", 1),
    "rtapp_v6": ("public/lisa/example_rtapp_trace.dat", 1),
    "load_v6": ("public/lisa/sched_load_trace.dat", 1),
    "fio_v6": ("local/fio_randread_2cpu_v7.dat", 2),  # two pages: chunks of several pages in v7
}

SEEDS: list[Seed] = (
    [Seed(name, "tracedat", ("v6",)) for name in _V6_SOURCES]
    + [Seed(f"{base}_v7_{comp}", "tracedat", ("v7", base, comp))
       for base in ("fio", "idle", "rtapp") for comp in ("zstd", "none", "zlib")]
    + [
        Seed("tracefs_txt", "text", ("head", "public/lisa/lisa_tests_trace.txt", 120)),
        Seed("doc_txt", "text", ("head", "public/lisa/doc_trace.txt", 120)),
        Seed("thermal_txt", "text", ("head", "public/lisa/trace_thermal.txt", 40)),
        Seed("not_raw_txt", "text", ("head", "public/trappy/trace_not_raw.txt", 120)),
        Seed("js_txt", "text", ("head", "public/catapult/android_systrace.txt", 80)),
        Seed("report_txt", "text", ("report", "fio_v6", [])),
        Seed("report_raw_txt", "text", ("report", "rtapp_v6", ["-R"])),
        Seed("systrace_html", "text", ("html", 150, False)),
        Seed("systrace_zlib_html", "text", ("html", 150, True)),
    ]
)

#: what each seed holds when built from the shared traces (trace-cmd 3.1.6, Debian bookworm's zlib)
SEEDS_SHA256: dict[str, str] = {
    "idle_v6": "d29e96e9b2d3e53f599cb4cc3602a6f8dce8cb41955026b557ed4d79eec379e9",
    "raw_v6": "ac3904fb35850fc9866fe645af71cdb832f9d035c9f130e6394109dde9716c10",
    "arm32_v6": "cef012d664e6fcc58cb05d00222e438dbfef49e49e8ed770d94f13a4e1dcd5aa",
    "hmp32_v6": "d8dff81bf7a1a965fa02bd8780f83771b8829b12bb6933dc0aaac4775f37ec2a",
    "rtapp_v6": "8d8d7529861a380190817a71b7ae69e50e2a27939e82bd014a835a67ded15bc7",
    "load_v6": "77092949cee930c82dc70efed15d9e722f526891c2a898b4a8251f3db150f0b2",
    "fio_v6": "d432fb2067b44666651b6b3759839da717623ae18cfde75a89b9b2023042dc33",
    "fio_v7_zstd": "5c90f52f5a74f9375d432f6ff43e2c00e562b2c61c278e7d879d81cfea3f340e",
    "fio_v7_none": "dad2495597ac83fbee0126e4703674c8615e7bfbc0c930e17e8027df52168783",
    "fio_v7_zlib": "9055c0ba1874935ae19702be383d81924cbb3e7c2ad98d0acb5c56f76af866ae",
    "idle_v7_zstd": "62037fcf4f8bd111649416cae23dd0b75402fd7272a7b92bea99bfae120e1f38",
    "idle_v7_none": "1e4ad7491449bcbd0660b67ebd65d345dea79e2772724943bd7ad71a97be6f0b",
    "idle_v7_zlib": "b12d22dc66b74317d6892ab10e85cc8ac570b0469e98ef8163fdea8b22ddb29e",
    "rtapp_v7_zstd": "0a06f46d644c91119ae0d931231d6f3e5dcbe09f8ec76551a758e43523da412f",
    "rtapp_v7_none": "39df4cf7dad87c68a0ed6319ed9c77932581a0b704b6bb7b5294e5a2efbe373e",
    "rtapp_v7_zlib": "5df0db93d7dbebc024ad65b5041db1dbdca6368d367e2affe40bb63c9e148aff",
    "tracefs_txt": "ab14374d816cfcbcfe0171baf898be3f7f15373ebda1d1b039db91d0e6784276",
    "doc_txt": "c7aa8be7ed877ac62d59f9f8763be6e59169ffc7ea701d8f66a2698109e8dd10",
    "thermal_txt": "57767fa1d584df43c1e4cfa27fb8e9b25e1a8021c0cf27e61a3c81a20c9be47f",
    "not_raw_txt": "cf0e0fcd8ae22ce6f508ffe79f8ec61d6202021c37386295748820c2803ee6b8",
    "js_txt": "585de91436a478d1ed1cc4019e109855813fc7355555a519166479b14dfbc0ab",
    "report_txt": "2b7defbd12bf2c31ced1d0937baffe6928c0855d23a991dc4ae25c0551d25e26",
    "report_raw_txt": "431e3793cac91da6b5bd1ba5b289c4c9a048bf7cac562892c77e81e2215881ff",
    "systrace_html": "f195b8631e5026a009c3512cbb5d6c34bfdb05e468bda9661287bc6ac6964a7f",
    "systrace_zlib_html": "5ef394abeb90cebc523b16a4f8c4d600f20c49f576e79b7b870b8a7be42bfd60",
}


def _v6_seed(name: str, out: Path) -> bytes:
    rel, pages = _V6_SOURCES[name]
    src = SHARED / rel
    raw = src.read_bytes()
    if raw[10:12] != b"6\0":  # a version 7 source: trace-cmd gives its version 6 form
        tmp = out.with_suffix(".src.dat")
        subprocess.run(["trace-cmd", "convert", "--file-version", "6", "--compression", "none",
                        "-i", str(src), "-o", str(tmp)], check=True, capture_output=True)
        raw = tmp.read_bytes()
        tmp.unlink()
    v6 = parse_v6(raw)
    v6.data = [d[: pages * v6.page_size] for d in v6.data]
    sys.path.insert(0, str(REPO))
    from lisa_ext.trace.tracedat import TraceDatReader

    full = out.with_suffix(".full.dat")
    full.write_bytes(write_v6(v6))
    recorded = set(TraceDatReader(full).record_counts())
    v6 = _keep_formats(v6, recorded)
    full.write_bytes(write_v6(v6))
    v6.kallsyms = _kept_kallsyms(full, v6)
    full.unlink()
    return write_v6(v6)


def _html(lines: int, compressed: bool) -> bytes:
    page = (SHARED / "public/trappy/trace_surfaceflinger.html").read_text()
    m = re.search(r'<script class="trace-data" type="application/text">(.*?)</script>', page[page.index("<body"):], re.S)
    assert m is not None
    text = "".join(m[1].splitlines(keepends=True)[:lines])
    if compressed:
        text = "\n" + base64.b64encode(zlib.compress(text.encode())).decode() + "\n"
    return (f'<!DOCTYPE html>\n<html>\n<head>\n<meta charset="utf-8"/>\n<title>Android System Trace</title>\n'
            f'</head>\n<body>\n  <script class="trace-data" type="application/text">{text}  </script>\n'
            f"</body>\n</html>\n").encode()


def _build(seed: Seed, directory: Path) -> bytes:
    how = seed.build
    path = directory / f"{seed.name}.seed"
    if how[0] == "v6":
        return _v6_seed(seed.name, path)
    if how[0] == "v7":
        _, base, comp = how
        v6 = seed_paths([f"{base}_v6"])[f"{base}_v6"]
        if comp == "zlib":  # Debian's trace-cmd writes no zlib: re-pack the zstd copy
            v7 = parse_v7(seed_paths([f"{base}_v7_zstd"])[f"{base}_v7_zstd"].read_bytes())
            return write_v7(replace(v7, compression=b"zlib", compressor_version=b"1.2.13"))
        tmp = path.with_suffix(".tmp")
        subprocess.run(["trace-cmd", "convert", "--file-version", "7", "--compression", comp,
                        "-i", str(v6), "-o", str(tmp)], check=True, capture_output=True)
        data = tmp.read_bytes()
        tmp.unlink()
        return data
    if how[0] == "head":
        _, rel, lines = how
        return b"".join((SHARED / rel).read_bytes().splitlines(keepends=True)[:lines])
    if how[0] == "report":
        _, base, flags = how
        v6 = seed_paths([base])[base]
        done = subprocess.run(["trace-cmd", "report", *flags, "-i", str(v6)], check=True, capture_output=True)
        return done.stdout
    if how[0] == "html":
        return _html(how[1], how[2])
    raise ValueError(how)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def seed_paths(names: list[str] | None = None) -> dict[str, Path]:
    """name -> path of each seed (all when ``names`` is None), built on first use."""
    directory = seed_dir()
    directory.mkdir(parents=True, exist_ok=True)
    out = {}
    for seed in SEEDS:
        if names is not None and seed.name not in names:
            continue
        path = directory / f"{seed.name}.seed"
        # a seed cached by an older recipe is rebuilt, not trusted: the pins say what it must hold
        if not path.exists() or _digest(path) != SEEDS_SHA256.get(seed.name, _digest(path)):
            data = _build(seed, directory)
            tmp = path.with_suffix(".part")
            tmp.write_bytes(data)
            tmp.rename(path)
        out[seed.name] = path
    return out


def main() -> int:
    for name, path in seed_paths().items():
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        pinned = SEEDS_SHA256.get(name)
        state = "" if pinned is None else ("ok" if pinned == digest else "DIFFERS from the pinned digest")
        print(f"{name:<20} {path.stat().st_size:>8} bytes  {digest}  {state}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
