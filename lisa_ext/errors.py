"""Errors shared by every layer: user mistakes are reported as one clear line."""

from __future__ import annotations

import os

__all__ = ["UserError", "SpecError"]


class UserError(Exception):
    """An error caused by the user's input; the CLI prints it as one line and exits 2."""


class SpecError(UserError):
    """A bad value in an input file: names the file, the key and what is allowed."""

    def __init__(self, path: str | os.PathLike | None, key: str, problem: str):
        self.path = os.fspath(path) if path is not None else "<input>"
        self.key = key
        self.problem = problem
        super().__init__(f"{self.path}: {key}: {problem}")
