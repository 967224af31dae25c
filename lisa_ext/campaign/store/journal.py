"""The runner's journal file (``.runner-journal.json``): what the run in progress changed on the
target, written before each change and signed, so that a killed runner's changes can be undone
and a journal this workbench did not write is never acted on."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from pathlib import Path

from lisa_ext.campaign.store.files import MAX_JSON_BYTES, fsync_dir, write_json
from lisa_ext.workbench import cache_root

__all__ = ["Journal"]


def _journal_key() -> bytes:
    """This machine's key for journal signatures, made on first use (readable by its owner only)."""
    path = cache_root() / "journal.key"
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"journal.key.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(os.urandom(32))
    try:
        os.link(tmp, path)  # atomic, and the first writer wins
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    return path.read_bytes()


def _sign(data: dict) -> str:
    payload = json.dumps(data, sort_keys=True, default=str).encode()
    return hmac.new(_journal_key(), payload, hashlib.sha256).hexdigest()


class Journal:
    """The file where the runner notes, before each change to the target, how to undo it
    (``.runner-journal.json``): what a killed runner left behind. The store owns the file;
    what goes in it is the target session's (:class:`lisa_ext.campaign.session.TargetSession`).

    Undoing a journal runs its commands as root on the target, so it carries a signature
    (``signature``: an HMAC-SHA256 under a key kept in the cache root, ``journal.key``): a
    journal this workbench did not write here (a campaign directory copied from a colleague,
    or edited) is reported as damaged and nothing is undone from it."""

    def __init__(self, path: Path):
        self.path = path

    def write(self, data: dict) -> None:
        write_json(self.path, {**data, "signature": _sign(data)})

    def read(self) -> dict | None:
        """The journal, ``None`` when there is none; a damaged one is ``{"damaged": why}``."""
        try:
            with open(self.path, "rb") as f:
                raw = f.read(MAX_JSON_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return {"damaged": f"cannot read {self.path}: {exc}"}
        if len(raw) > MAX_JSON_BYTES:
            return {"damaged": f"{self.path}: larger than {MAX_JSON_BYTES // 2**20} MiB"}
        try:
            data = json.loads(raw.decode("utf-8") or "{}")
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            return {"damaged": f"{self.path}: not valid JSON ({type(exc).__name__})"}
        if not isinstance(data, dict):
            return {"damaged": f"{self.path}: not a JSON object"}
        if not data:
            return data
        signature = data.pop("signature", None)
        if not isinstance(signature, str) or not hmac.compare_digest(signature, _sign(data)):
            return {"damaged": f"{self.path} was not written by this workbench on this machine (its "
                               "signature does not match): undo what it names on the target by hand"}
        return data

    def clear(self) -> None:
        try:
            self.path.unlink()
        except FileNotFoundError:
            return
        fsync_dir(self.path.parent)
