"""Errors shared by every layer: user mistakes are reported as one clear line."""

from __future__ import annotations

import os

__all__ = ["SpecError", "UserError", "one_line"]


class UserError(Exception):
    """An error caused by the user's input; the CLI prints it as one line and exits 2."""


def one_line(text: str) -> str:
    """``text`` with every control character escaped: a key or value from a hostile file must
    not break the one-line message or drive the terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class SpecError(UserError):
    """A bad value in an input file: names the file, the key and what is allowed, in one line."""

    def __init__(self, path: str | os.PathLike | None, key: str, problem: str):
        self.path = one_line(os.fspath(path)) if path is not None else "<input>"
        self.key = one_line(str(key))
        self.problem = one_line(problem)
        super().__init__(f"{self.path}: {self.key}: {self.problem}")
