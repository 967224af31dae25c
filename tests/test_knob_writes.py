"""Knob writes batched into few target commands, on a real shell (``sh -c``, as a board's SSH runs).

On the board every target command is an SSH round trip paid in the guest's time, and a variant
sets a dozen files (one ``disable`` per idle state and CPU), so writes and reverts go in batches;
these tests hold the batch to what one write per command did: order, the first failure stopping
the writes after it, reverts going on past one, and what each file reads back.
"""

from __future__ import annotations

import subprocess

import pytest

from lisa_ext import knobs
from lisa_ext.target import TargetCommandError


class CountingShell:
    """``sh -c`` on this machine, counting the commands it is given."""

    def __init__(self):
        self.commands: list[str] = []

    def execute(self, command, *, as_root=False, timeout=600, check_exit_code=True):
        self.commands.append(command)
        proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=timeout)
        if proc.returncode and check_exit_code:
            raise TargetCommandError(proc.stderr)
        return proc.stdout


def _files(tmp_path, count, text="old\n"):
    paths = []
    for i in range(count):
        path = tmp_path / f"knob{i}"
        path.write_text(text)
        paths.append(path)
    return paths


def test_a_variants_knobs_are_read_written_and_reverted_in_three_commands(tmp_path):
    shell = CountingShell()
    paths = _files(tmp_path, 8)
    wanted = {str(p): f"v{i}" for i, p in enumerate(paths)}
    with knobs.applied_knobs(shell, wanted) as state:
        assert [p.read_text() for p in paths] == [f"v{i}" for i in range(8)]
        assert {p: s["read_back"] for p, s in state.items()} == wanted
        assert {s["original"] for s in state.values()} == {"old"}
    assert [p.read_text() for p in paths] == ["old"] * 8
    assert len(shell.commands) == 3  # read the originals, write, revert


#: a sysctl every Linux reads and none lets anyone write, root included (mode 0444: kernel/sysctl.c,
#: fs/proc/proc_sysctl.c test_perm() gives root the owner's bits)
UNWRITABLE = "/proc/sys/kernel/osrelease"


def test_the_first_failing_write_stops_the_batch(tmp_path):
    shell = CountingShell()
    before, after = _files(tmp_path, 2)
    with pytest.raises(knobs.KnobError) as err:
        knobs.apply_knobs(shell, {str(before): "new", UNWRITABLE: "1", str(after): "new"})
    assert str(err.value).startswith(f"could not write '1' to {UNWRITABLE}: ")
    assert before.read_text() == "new" and after.read_text() == "old\n"  # written up to the failure only
    assert len(shell.commands) == 1


def test_applied_knobs_reverts_what_it_wrote_before_a_failure(tmp_path):
    shell = CountingShell()
    before, after = _files(tmp_path, 2)
    journaled = {}
    with pytest.raises(knobs.KnobError, match=f"could not write '1' to {UNWRITABLE}: "):
        with knobs.applied_knobs(shell, {str(before): "new", UNWRITABLE: "1", str(after): "new"},
                                 on_originals=journaled.update):
            pytest.fail("the block ran although a knob was not written")
    assert set(journaled) == {str(before), UNWRITABLE, str(after)}
    assert before.read_text() == "old" and after.read_text() == "old\n"


def test_revert_goes_on_past_a_file_it_cannot_write(tmp_path):
    shell = CountingShell()
    first, last = _files(tmp_path, 2, "changed\n")
    broken = tmp_path / "a-directory"
    broken.mkdir()
    failures = knobs.revert_knobs(shell, {str(first): "a", str(broken): "b", str(last): "c"})
    assert len(failures) == 1 and failures[0].startswith(f"{broken}: could not write 'b' to {broken}: ")
    assert first.read_text() == "a" and last.read_text() == "c"
    assert len(shell.commands) == 1


def test_page_sized_values_are_split_over_commands_and_all_written(tmp_path):
    shell = CountingShell()
    paths = _files(tmp_path, 5)
    wanted = {str(p): str(i) * 4000 for i, p in enumerate(paths)}
    assert knobs.apply_knobs(shell, wanted) == wanted
    assert [p.read_text() for p in paths] == list(wanted.values())
    assert 2 <= len(shell.commands) <= 5
    assert all(len(c) <= knobs._COMMAND_MAX for c in shell.commands)


def test_values_and_read_backs_keep_their_text(tmp_path):
    """An empty value arrives as a newline (sysfs ignores a zero-byte write); a bracketed choice
    and a value holding the batch's own separator words read back as themselves."""
    shell = CountingShell()
    empty, choice, odd = _files(tmp_path, 3)
    choice.write_text("none [mq-deadline] kyber\n")
    marker = "--lisa-ext-knob-failed--"
    applied = knobs.apply_knobs(shell, {str(empty): "", str(odd): f"x {marker} y"})
    assert applied == {str(empty): "", str(odd): f"x {marker} y"}
    assert empty.read_bytes() == b"\n"
    assert knobs.revert_knobs(shell, {str(choice): "none [mq-deadline] kyber"}) == [
        f"{choice} reads 'mq-deadline' after reverting to 'none [mq-deadline] kyber'"]


def test_globs_are_expanded_together_and_each_match_written(tmp_path):
    shell = CountingShell()
    for cpu in range(4):
        for state in (1, 2):
            (tmp_path / f"cpu{cpu}" / f"state{state}").mkdir(parents=True)
            (tmp_path / f"cpu{cpu}" / f"state{state}" / "disable").write_text("0\n")
    (tmp_path / "scaling_governor").write_text("performance\n")
    applied = knobs.apply_knobs(shell, {f"{tmp_path}/cpu*/state[2-9]/disable": "1",
                                        f"{tmp_path}/scaling_gov*": "schedutil"})
    assert sorted(applied) == sorted([f"{tmp_path}/cpu{c}/state2/disable" for c in range(4)]
                                     + [f"{tmp_path}/scaling_governor"])
    assert {(tmp_path / f"cpu{c}" / f"state{s}" / "disable").read_text() for c in range(4) for s in (1, 2)} \
        == {"0\n", "1"}
    assert len(shell.commands) == 2  # expand every glob, write every match
    with pytest.raises(knobs.KnobError, match=f"knob {tmp_path}/gpu\\*/x: no file matches on the target"):
        knobs.apply_knobs(shell, {f"{tmp_path}/cpu*/state1/disable": "1", f"{tmp_path}/gpu*/x": "1"})


def test_checking_a_variants_knobs_reads_every_file_in_one_command(tmp_path):
    shell = CountingShell()
    plain, choice, flags = _files(tmp_path, 3)
    choice.write_text("none [mq-deadline] kyber\n")
    flags.write_text("PLACE_LAG NO_NEXT_BUDDY UTIL_EST\n")
    unreadable = tmp_path / "a-directory"
    unreadable.mkdir()
    problems = knobs.check_knobs(shell, {str(plain): "x", str(choice): "bfq", str(flags): "NO_UTIL_EST",
                                         str(tmp_path / "missing"): "1", str(unreadable): "1",
                                         f"{tmp_path}/knob[0]": "y"})
    assert problems == [
        f"{choice}: 'bfq' is not offered (choices: none, mq-deadline, kyber)",
        f"{tmp_path / 'missing'} does not exist on the target",
        f"{unreadable} cannot be read: cat: {unreadable}: Is a directory",
    ]
    assert len(shell.commands) == 2  # expand the glob, read every file
    assert knobs.check_knobs(shell, {str(flags): "NO_SIS_UTIL"}) == [
        f"{flags}: no flag 'SIS_UTIL' (expected NAME or NO_NAME of one of: PLACE_LAG NO_NEXT_BUDDY UTIL_EST)"]


def test_reading_the_originals_names_a_file_that_is_gone(tmp_path):
    shell = CountingShell()
    present, gone = _files(tmp_path, 2)
    present.write_text("none [mq-deadline] kyber\n")
    assert knobs.read_knobs(shell, {str(present): "kyber"}) == {str(present): "mq-deadline"}
    gone.unlink()
    with pytest.raises(knobs.KnobError, match=rf"^knob {gone} does not exist on the target$"):
        knobs.read_knobs(shell, {str(present): "kyber", str(gone): "1"})
    assert len(shell.commands) == 2  # one read each time, whatever the number of files
