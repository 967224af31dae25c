"""Which tasks an analysis looks at: by comm, pid, thread group, process tree or executable.

A selector is a short string, the same in Python, notebooks and the CLI:

``comm:REGEX`` (or a bare ``REGEX``)
    tasks one of whose names matches (``re.search``) in ``sched_switch`` /
    ``sched_waking`` / ``sched_wakeup``;
``pid:N[,N...]``
    those tasks;
``tgid:N[,N...]``
    the thread group: N and every thread created in it during the trace
    (``task:task_newtask`` with ``CLONE_THREAD``, kernel/fork.c ``copy_process``);
``tree:N[,N...]``
    N and every task it created, recursively (``sched:sched_process_fork``, else
    ``task:task_newtask``): a benchmark's processes and threads;
``exec:NAME``
    the tasks that executed a program named NAME (``sched:sched_process_exec``,
    fs/exec.c ``exec_binprm``; the file's base name) and every task they created:
    "the workload's own process tree", without knowing its pids.

``tgid``, ``tree`` and ``exec`` need those events in the trace (a campaign's ``trace:
events:`` list): tasks created before tracing started cannot be told apart and are
named by their pid only. :func:`select_pids` resolves a selector on a trace.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from lisa_ext.analysis._frames import has_event, int_column
from lisa_ext.errors import UserError

__all__ = ["CLONE_THREAD", "KINDS", "TaskSelector", "TREE_EVENTS", "select_pids"]

#: include/uapi/linux/sched.h
CLONE_THREAD = 0x00010000
#: selector kinds
KINDS = ("comm", "pid", "tgid", "tree", "exec")
#: events the tree-based selectors read (any of the first two, the third for ``exec``)
TREE_EVENTS = ("sched_process_fork", "task_newtask", "sched_process_exec")


@dataclass(frozen=True)
class TaskSelector:
    kind: str
    value: str

    @classmethod
    def parse(cls, text: "str | TaskSelector") -> "TaskSelector":
        """``KIND:VALUE`` (:data:`KINDS`), or a bare regular expression on comm."""
        if isinstance(text, TaskSelector):
            return text
        kind, sep, value = str(text).partition(":")
        if not sep or kind not in KINDS:
            kind, value = "comm", str(text)
        selector = cls(kind, value)
        if kind == "comm":
            try:
                re.compile(value)
            except re.error as exc:
                raise UserError(f"task selector {text!r}: bad regular expression: {exc}") from None
        elif kind in ("pid", "tgid", "tree"):
            selector.numbers()
        elif not value:
            raise UserError(f"task selector {text!r}: expected exec:NAME")
        return selector

    def numbers(self) -> list[int]:
        values = [v for v in self.value.split(",") if v.strip()]
        try:
            if not values:
                raise ValueError(self.value)
            return [int(v) for v in values]
        except ValueError:
            raise UserError(f"task selector '{self.kind}:{self.value}': expected "
                            f"{self.kind}:N or {self.kind}:N,N,... (pids)") from None

    def __str__(self) -> str:
        return f"{self.kind}:{self.value}"


def _comms(trace: Any) -> dict[int, set[str]]:
    """Every name each pid had in the scheduler events."""
    names: dict[int, set[str]] = {}
    pairs = [("sched_switch", "prev_pid", "prev_comm"), ("sched_switch", "next_pid", "next_comm"),
             ("sched_waking", "pid", "comm"), ("sched_wakeup", "pid", "comm")]
    for event, pid_col, comm_col in pairs:
        if not has_event(trace, event):
            continue
        df = trace.df_event(event)
        for pid, comm in set(zip(int_column(df, pid_col).tolist(), df[comm_col].astype(str))):
            names.setdefault(pid, set()).add(comm)
    return names


def _children(trace: Any, threads_only: bool = False) -> dict[int, list[int]]:
    """parent pid -> pids it created (threads only with ``threads_only``)."""
    edges: list[tuple[int, int]] = []
    if not threads_only and has_event(trace, "sched_process_fork"):
        df = trace.df_event("sched_process_fork")
        edges = list(zip(int_column(df, "parent_pid").tolist(), int_column(df, "child_pid").tolist()))
    elif has_event(trace, "task_newtask"):
        df = trace.df_event("task_newtask")
        keep = np.ones(len(df), dtype=bool)
        if threads_only:
            keep = (int_column(df, "clone_flags") & CLONE_THREAD) != 0
        edges = list(zip(int_column(df, "__pid")[keep].tolist(), int_column(df, "pid")[keep].tolist()))
    else:
        needed = "task:task_newtask" if threads_only else "sched:sched_process_fork or task:task_newtask"
        raise UserError(f"selecting tasks by {'thread group' if threads_only else 'process tree'} needs "
                        f"{needed} in the trace (add it to the campaign's trace: events:)")
    children: dict[int, list[int]] = {}
    for parent, child in edges:
        children.setdefault(parent, []).append(child)
    return children


def _closure(roots: list[int], children: dict[int, list[int]]) -> set[int]:
    seen, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo.extend(children.get(pid, ()))
    return seen


def select_pids(trace: Any, selector: "str | TaskSelector") -> set[int]:
    """The pids ``selector`` names in ``trace`` (a LISA trace or :func:`lisa_ext.trace.load_trace`'s)."""
    sel = TaskSelector.parse(selector)
    if sel.kind == "comm":
        pattern = re.compile(sel.value)
        return {pid for pid, names in _comms(trace).items() if any(pattern.search(n) for n in names)}
    if sel.kind == "pid":
        return set(sel.numbers())
    if sel.kind == "tgid":
        return _closure(sel.numbers(), _children(trace, threads_only=True))
    if sel.kind == "tree":
        return _closure(sel.numbers(), _children(trace))
    if not has_event(trace, "sched_process_exec"):
        raise UserError("selecting tasks by executable needs sched:sched_process_exec in the trace "
                        "(add it to the campaign's trace: events:)")
    df = trace.df_event("sched_process_exec")
    names = df["filename"].astype(str).map(lambda f: f.rsplit("/", 1)[-1])
    roots = int_column(df, "pid")[(names == sel.value).to_numpy()].tolist()
    return _closure(roots, _children(trace)) if roots else set()
