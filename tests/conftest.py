"""Skips that cannot hide failures.

Outside CI a test may skip when this machine lacks something (no root, no QEMU, a shared
trace not unpacked), so a developer can run the suite anywhere. Under ``CI=true`` every such
skip is a failure: CI installs everything the suite needs (``.ci/run``), so a skip there means
a test did not run what it claims to check. The one exception is a reason CI really lacks on
any machine it runs on (a phone, a device the host does not have), declared by the skip's
reason starting with :data:`EXTERNAL`: ``pytest.skip(f"{EXTERNAL}no Android device attached")``.
"""

from __future__ import annotations

import os

import pytest

#: how a skip declares that what it lacks is outside any CI machine, not a missing install
EXTERNAL = "external: "


def _in_ci() -> bool:
    return os.environ.get("CI") == "true"


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _fail_undeclared_skip(report) -> None:
    if not (_in_ci() and report.skipped) or hasattr(report, "wasxfail"):
        return
    reason = _skip_reason(report)
    if reason.startswith(EXTERNAL):
        return
    report.outcome = "failed"
    report.longrepr = (f"skipped under CI=true without an external reason: {reason} "
                       f"(CI must run this test; a reason CI lacks on every machine starts with {EXTERNAL!r})")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_undeclared_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _fail_undeclared_skip(outcome.get_result())
