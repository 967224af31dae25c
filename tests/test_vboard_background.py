"""The builds a board's first deploy starts beside its kernel build (lisa_ext.vboard.background):
a failure is left for whoever needs the build, and a process that ends waits for them."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from lisa_ext.vboard import background


def test_a_failed_build_is_not_raised_in_the_thread(caplog):
    def build() -> None:
        raise RuntimeError("no space left")

    with caplog.at_level("DEBUG", logger="lisa_ext.vboard.background"):
        background.start("doomed build", build).join(timeout=30)
    assert "doomed build in the background failed: no space left" in caplog.text


def test_a_process_that_ends_waits_for_its_builds(tmp_path):
    done = tmp_path / "done"
    script = textwrap.dedent(f"""
        import pathlib, time
        from lisa_ext.vboard import background
        background.start("slow build", lambda: (time.sleep(1.5), pathlib.Path({str(done)!r}).write_text("built")))
        raise SystemExit(3)  # as a failed kernel build ends the command
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3
    assert done.read_text() == "built"
    assert "waiting for the background slow build to finish" in proc.stderr


def test_a_process_without_builds_says_nothing(tmp_path):
    script = "from lisa_ext.vboard import background\nbackground.start('quick build', lambda: None).join()\n"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stderr == ""
