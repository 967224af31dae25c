"""What every workload kind provides to the runner."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping

from lisa_ext.schema import Field
from lisa_ext.campaign.store.records import Metric

__all__ = ["Workload", "WorkloadError", "RunContext"]


class WorkloadError(RuntimeError):
    """The workload ran but failed; the message says why, in one or two lines."""


@dataclass
class RunContext:
    """Where one run happens and where its files go."""

    target: Any
    """The connected :class:`lisa.target.Target`."""
    remote_dir: str
    """A fresh directory on the target for this run's files."""
    local_dir: Path
    """The run's (temporary) directory in the store."""
    on_pid: Callable[[int], None]
    """Call with the pid of every background process started, for crash recovery."""
    campaign_state: dict
    """Per-campaign values computed once (e.g. rt-app calibration), kept across resumes."""
    on_cleanup: Callable[[str], None] = lambda command: None
    """Call with an idempotent shell command undoing a change to the target (a server's
    scratch directory, a dm device) before making it: if the runner is killed, the next
    run executes it (as root) during recovery."""


class Workload(abc.ABC):
    KIND: ClassVar[str]
    SCHEMA: ClassVar[Mapping[str, Field]]
    TOOLS: ClassVar[tuple[str, ...]] = ()

    def __init__(self, name: str, options: dict):
        self.name = name
        self.options = options

    @classmethod
    def check_options(cls, path, prefix: str, options: dict) -> None:
        """Cross-key checks beyond ``SCHEMA``; raise SpecError on a problem."""

    @classmethod
    def check_target(cls, path, prefix: str, options: dict, config: Callable[[], Any]) -> None:
        """Checks against the target config (``config()`` reads it, once per spec): what the
        options may touch on that target; raise SpecError on a problem."""

    def setup_campaign(self, target, state: dict) -> None:
        """Once per campaign, before any variant is applied; may add to ``state``."""

    def prepare(self, ctx: RunContext) -> None:
        """Per run, after the variant is applied and before tracing starts."""

    @abc.abstractmethod
    def run(self, ctx: RunContext) -> list[Metric]:
        """Run one iteration (traced by the caller); raise WorkloadError on failure."""

    def cleanup(self, ctx: RunContext) -> None:
        """Per run, after tracing stopped, failure included."""
