"""Every ``lisa-ext`` command and action follows one convention in its ``--help``.

The convention (stated in :mod:`lisa_ext.cli`): a description on every parser;
plain help text, no reST markup; ``-o/--out`` is where a command writes its
result and ``--data DIR`` a campaign directory; a value is shown as an
upper-case placeholder (or the list of its choices); an option name means the
same thing, with the same placeholder, in every command.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from lisa_ext.cli import COMMANDS, build_parser, main
from lisa_ext.report.build import campaign_metrics

#: reST that leaks from docstrings: ``literal``, :func:`x`, `x`_ links
_REST = re.compile(r"``|:(?:func|mod|class|meth|attr|data|exc|obj|ref):`|`_\b")
_METAVAR = re.compile(r"^[A-Z][A-Z0-9_]*(?:[.,][A-Z0-9_.,]*)?$")
#: options whose meaning is fixed across commands: name -> allowed placeholders
_FIXED = {"-o": {"DIR", "FILE", "HTML"}, "--out": {"DIR", "FILE", "HTML"}, "--data": {"DIR"}}
#: spellings replaced by the convention
_RETIRED = {"--output": "-o/--out", "--campaign": "--data", "--outdir": "-o/--out"}


def _parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    root = build_parser(every_command=True)
    found, todo = [], [("lisa-ext", root)]
    while todo:
        path, parser = todo.pop()
        found.append((path, parser))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo.extend((f"{path} {name}", sub) for name, sub in action.choices.items())
    return found


PARSERS = _parsers()


def _value_actions(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) or action.nargs == 0:
            continue
        yield action


def test_every_command_registers():
    names = {path.split()[1] for path, _ in PARSERS if len(path.split()) > 1}
    assert names == set(COMMANDS)
    assert len(PARSERS) > 20


@pytest.mark.parametrize("path,parser", PARSERS, ids=[p for p, _ in PARSERS])
def test_help_has_a_description_and_no_rest_markup(path, parser):
    assert (parser.description or "").strip(), f"{path}: no description"
    text = parser.format_help()
    assert not _REST.search(text), f"{path} --help has reST markup: {_REST.search(text).group(0)!r}\n{text}"


@pytest.mark.parametrize("path,parser", PARSERS, ids=[p for p, _ in PARSERS])
def test_values_have_upper_case_placeholders_and_help(path, parser):
    problems = []
    for action in _value_actions(parser):
        name = "/".join(action.option_strings) or action.dest
        if action.help in (None, ""):
            problems.append(f"{name}: no help")
        if action.choices is None and not (isinstance(action.metavar, str) and _METAVAR.match(action.metavar)):
            problems.append(f"{name}: placeholder {action.metavar!r} is not upper case")
    assert not problems, f"{path}: " + "; ".join(problems)


def test_an_option_means_one_thing_everywhere():
    placeholders: dict[str, set[str]] = defaultdict(set)
    problems = []
    for path, parser in PARSERS:
        for action in _value_actions(parser):
            for option in action.option_strings:
                if option in _RETIRED:
                    problems.append(f"{path}: {option} (use {_RETIRED[option]})")
                if action.choices is None:
                    placeholders[option].add(str(action.metavar))
            if "--out" in action.option_strings and "-o" not in action.option_strings:
                problems.append(f"{path}: --out without its short form -o")
            # an option naming a campaign directory is --data (read or filled) or --out (written)
            if action.option_strings and "campaign directory" in (action.help or "") \
                    and not {"--data", "--out"} & set(action.option_strings):
                problems.append(f"{path}: {'/'.join(action.option_strings)} names a campaign directory: use --data")
    for option, allowed in _FIXED.items():
        if not placeholders[option] <= allowed:
            problems.append(f"{option} placeholders {sorted(placeholders[option])}, allowed {sorted(allowed)}")
    for option, seen in placeholders.items():
        if option not in _FIXED and len(seen) > 1:
            problems.append(f"{option} has several placeholders: {sorted(seen)}")
    assert not problems, "\n".join(problems)


def test_the_command_leaves_early_with_its_whole_output_and_exit_code(tmp_path, capsys):
    """``lisa-ext`` (lisa_ext.cli.run) skips the interpreter's teardown: what a command
    printed to a pipe still arrives whole, and its exit code is kept."""
    sample = Path(__file__).resolve().parents[1] / "data" / "samples" / "wq-affinity"
    metrics = tmp_path / "metrics.csv"
    table = campaign_metrics(sample, traces=False)
    table[table["workload"] == "fio-randread"].to_csv(metrics, index=False)
    argv = ["compare", str(metrics), "--baseline", "cache", "--format", "markdown"]
    assert main(argv) == 0
    expected = capsys.readouterr().out
    # all of it still in the buffer of a pipe's stdout when the command returns
    assert "read_iops" in expected and len(expected) < 8192
    # block-buffered, as a pipe's stdout is unless the environment says otherwise
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    done = subprocess.run([sys.executable, "-m", "lisa_ext.cli", *argv], capture_output=True,
                          text=True, timeout=120, env=env)
    assert (done.returncode, done.stdout) == (0, expected)
    bad = subprocess.run([sys.executable, "-m", "lisa_ext.cli", "compare", str(tmp_path / "none.csv"),
                          "--baseline", "cache"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and "none.csv" in bad.stderr


@pytest.mark.parametrize("argv", [["report", "CAMPAIGN", "--jobs", "0"], ["report", "CAMPAIGN", "--jobs", "-3"],
                                  ["kernel", "build", "VARIANT", "-j", "0"],
                                  ["kernel", "build", "VARIANT", "--jobs", "1025"]])
def test_a_number_of_jobs_below_one_or_above_the_bound_is_refused_before_anything_runs(argv, tmp_path, capsys):
    # -j0 / -j-3 reached make only after the kernel tree was prepared; --jobs 0 drew serially.
    # The paths do not exist: the option is refused before any of them is looked at
    argv = [str(tmp_path / word) if word.isupper() else word for word in argv]
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"'{argv[-1]}': expected a number of jobs from 1 to 1024" in err


def test_a_plain_interrupt_says_interrupted(monkeypatch, capsys):
    """A Ctrl-C with nothing to say (a bare KeyboardInterrupt, e.g. during `vboard up`'s build) prints
    "interrupted", not an empty message."""
    import lisa_ext.cli as cli

    def stopped(args):
        raise KeyboardInterrupt

    parser = argparse.ArgumentParser()
    parser.set_defaults(command="vboard", func=stopped)
    monkeypatch.setattr(cli, "build_parser", lambda argv: parser)
    assert main([]) == cli.EXIT_INTERRUPTED
    assert capsys.readouterr().err == "lisa-ext vboard: interrupted\n"
