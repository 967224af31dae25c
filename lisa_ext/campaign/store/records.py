"""The records every layer shares about a run: the :class:`Metric` a workload or meter reports,
the :class:`RunKey` naming a run and the :class:`RunResult` its ``result.json`` holds."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterator

__all__ = ["RUN_STATUSES", "Metric", "RunKey", "RunResult"]

RUN_STATUSES = ("ok", "failed")


@dataclass(frozen=True)
class Metric:
    """One figure a workload reports for one run."""

    name: str
    value: float
    unit: str
    lower_is_better: bool

    def to_json(self) -> dict:
        return {"name": self.name, "value": float(self.value), "unit": self.unit,
                "lower_is_better": bool(self.lower_is_better)}

    def __iter__(self) -> Iterator[Any]:
        """``name, value, unit, lower_is_better = metric`` (the report's tuples)."""
        return iter((self.name, self.value, self.unit, self.lower_is_better))


@dataclass(frozen=True, order=True)
class RunKey:
    variant: str
    workload: str
    iteration: int

    def __str__(self) -> str:
        return f"{self.variant}/{self.workload}/{self.iteration}"

    @classmethod
    def parse(cls, label: str) -> "RunKey | None":
        """The key ``str(key)`` wrote (``variant/workload/iteration``), None if ``label`` is not one."""
        parts = str(label).split("/")
        if len(parts) != 3 or not parts[2].isdigit():
            return None
        return cls(parts[0], parts[1], int(parts[2]))


@dataclass
class RunResult:
    campaign: str
    variant: str
    workload: str
    iteration: int
    status: str
    error: str | None
    metrics: list[Metric]

    @property
    def key(self) -> RunKey:
        return RunKey(self.variant, self.workload, self.iteration)

    def to_json(self) -> dict:
        d = asdict(self)
        d["metrics"] = [m.to_json() for m in self.metrics]
        return d
