"""Target configs: a LISA ``target_conf`` YAML, read and checked once.

The files in ``target-configs/`` are LISA target_conf files (``lisa/target.py``,
``TargetConf.STRUCTURE``): a top-level ``target-conf`` mapping, an optional
``platform-info`` mapping and our own optional ``lisa-ext`` mapping. They are
checked here against LISA's own key descriptors so that a typo stops before
anything runs, with the file, the key and the allowed keys in one message.
:meth:`TargetConfig.load` is the one reader: a campaign spec holds the result
(:attr:`lisa_ext.campaign.spec.CampaignSpec.target_config`) and everything
after it (the target, its session, recovery) takes it from there.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lisa_ext.compat import import_lisa
from lisa_ext.errors import SpecError
from lisa_ext.schema import Field, argument_problem, check_mapping, in_bounds, load_yaml, show, type_names
from lisa_ext.ssh import Endpoint, Trust

__all__ = ["KINDS", "TargetConfig", "device_problem", "known_tools"]

#: LISA's target kinds (``lisa.target.TargetConf``): this machine, a Linux board over SSH, Android over ADB
KINDS = ("host", "linux", "android")

_TOP_KEYS = ("target-conf", "platform-info", "lisa-ext")
#: a block device path of the target: one word of a job file, a dmsetup table and the target's shell
_DEVICE = re.compile(r"/dev/[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+){0,8}")


def device_problem(value: Any) -> str | None:
    """What keeps ``value`` from being a plain block device path (``/dev/...``, no ``..``), or None."""
    if not isinstance(value, str) or not _DEVICE.fullmatch(value) or ".." in value.split("/"):
        return (f"{show(value)} is not a block device path (/dev/ then letters, digits, '_', '.', '-' "
                "and '/', no '..')")
    return None


def _scratch_devices_problem(value: list) -> str | None:
    return next(filter(None, map(device_problem, value)), None)


#: our own settings in a target config, under ``lisa-ext:`` (LISA reads only its own keys)
_EXTRA_SCHEMA = {
    "description": Field((str,), "how pages name this platform, e.g. 'Pixel 6 (Tensor G1), Android 14' "
                         "(one line of at most 120 characters; default: target-conf's name)",
                         check=lambda v: None if 0 < len(v) <= 120 and v.isprintable() else
                         "expected one printable line of 1 to 120 characters"),
    "reset-command": Field((str,), "host shell command that power-cycles or resets the board "
                           "(a lab's PDU or relay), run when the board is lost mid-run"),
    "reset-timeout-s": Field((int, float), "seconds to wait for the board after a reset (default 600)",
                             bounds=(1, 86_400)),
    "probe-interval-s": Field((int, float), "seconds between health probes during a run (default 5)",
                              bounds=(0.1, 3_600)),
    "probe-misses": Field((int,), "failed probes in a row that mean the board is lost (default 3)",
                          bounds=(1, 1_000)),
    "scratch-devices": Field((list,), "block devices of the target whose data workloads may destroy "
                             "(fio's filename, dm-crypt's backing), e.g. [/dev/vdc]: a spare disk",
                             check=_scratch_devices_problem),
}


def _check_level(path: Path, node: Any, level: Any, prefix: str) -> None:
    from lisa.conf import LevelKeyDesc  # deferred: LISA takes seconds; only config checks need it

    if not isinstance(node, dict):
        raise SpecError(path, prefix, f"expected a mapping ({level.help})")
    allowed = {kd.name: kd for kd in level.children}
    for key, value in node.items():
        dotted = f"{prefix}.{key}"
        kd = allowed.get(key)
        if kd is None:
            raise SpecError(path, dotted, f"unknown key; allowed here: {', '.join(allowed)}")
        if isinstance(kd, LevelKeyDesc):
            _check_level(path, value, kd, dotted)
            continue
        try:
            kd.validate_val(value)
        except (TypeError, ValueError):
            types = tuple(t if t is not None else type(None) for t in kd.classinfo
                          if t is None or isinstance(t, type))
            raise SpecError(path, dotted, f"expected {type_names(types) or 'another type'} "
                            f"({kd.help}), got {value!r}") from None


#: target-conf keys that reach an ssh or adb command line (or a target shell) as one word, and the
#: characters each may hold: devlib builds adb's command line for a shell, the serial unquoted
_ARGUMENT_KEYS = {
    "host": ("a host name or address", re.compile(r"[A-Za-z0-9._:%\[\]-]{1,253}")),
    "username": ("a user name", re.compile(r"[A-Za-z0-9._@-]{1,64}")),
    "device": ("an adb serial", re.compile(r"[A-Za-z0-9._:-]{1,128}")),
    "workdir": ("a directory path", re.compile(r"/[A-Za-z0-9._+@:,/-]{0,254}")),
}
#: a make variable's value, one word: make would run a CC or CROSS_COMPILE holding a command line
_MAKE_VALUE = re.compile(r"[A-Za-z0-9._+=,:/-]{0,255}")


def _check_hostile_values(path: Path, conf: dict) -> None:
    """Refuse what in a target config would run a command on this machine: a host, user name, adb
    serial or working directory that a program would read as an option or a shell would split (a
    user name ``-oProxyCommand=...`` on ssh's command line ran a command), a devlib platform class
    outside ``devlib.platform`` (LISA imports the name and calls it with the config's arguments:
    ``subprocess.Popen`` ran one), and make variables for LISA's module build holding a command."""
    for key, (what, allowed) in _ARGUMENT_KEYS.items():
        value = conf.get(key)
        if value is None:
            continue
        problem = argument_problem(value, what)
        if problem is None and not allowed.fullmatch(value):
            problem = f"{value!r} is not {what}" + (" ('@' belongs in target-conf.username)" if "@" in value else "")
        if problem:
            raise SpecError(path, f"target-conf.{key}", problem)
    port = conf.get("port")
    if port is not None and not (isinstance(port, int) and in_bounds(port, 1, 65_535)):
        raise SpecError(path, "target-conf.port", f"expected a TCP port from 1 to 65535, got {port!r}")
    platform_class = (((conf.get("devlib") or {}).get("platform") or {}).get("class"))
    if platform_class is not None and not re.fullmatch(r"devlib\.platform(\.[A-Za-z_][A-Za-z0-9_]*)+",
                                                       str(platform_class)):
        raise SpecError(path, "target-conf.devlib.platform.class", f"{platform_class!r} is not a class of "
                        "devlib.platform (LISA imports and calls it: devlib.platform.Platform, "
                        "devlib.platform.arm.Juno, ...)")
    make = ((conf.get("kernel") or {}).get("modules") or {}).get("make-variables") or {}
    for name, value in make.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", str(name)) or not _MAKE_VALUE.fullmatch(str(value)):
            raise SpecError(path, f"target-conf.kernel.modules.make-variables.{name}",
                            f"{show(value)}: a make variable is a name and one word (no spaces or shell "
                            "characters: make would run a compiler given as a command line)")


def known_tools() -> frozenset[str]:
    """The tools a target config's ``tools:`` may name: those LISA ships binaries of
    (``lisa/_assets/binaries/<abi>/``), which its ``install_tools`` pushes to the target by name."""
    assets = import_lisa("lisa._assets")
    return frozenset(name for binaries in assets.ABI_BINARIES.values() for name in binaries)


def _check_tools(path: Path, conf: dict) -> None:
    """``tools:`` names tools, never files: LISA joins each entry to its assets directory, which
    keeps an absolute path as it is, and pushes that file to the target (a private key went to
    the board)."""
    known = known_tools()
    for i, tool in enumerate(conf.get("tools") or ()):
        if tool not in known:
            raise SpecError(path, f"target-conf.tools[{i}]", f"{show(tool)} is not a tool LISA ships; name "
                            f"one of: {', '.join(sorted(known))} (schbench and ebizzy: lisa-ext campaign "
                            "tool install)")


def _check_host(path: Path, conf: dict) -> None:
    """What this machine as a target needs."""
    if (conf.get("devlib") or {}).get("platform"):
        raise SpecError(path, "target-conf.devlib.platform", "lisa-ext sets devlib's platform of this machine "
                        "itself (it keeps the target's directories private): remove this key")


def _check_ssh(path: Path, conf: dict) -> None:
    """What an SSH login needs."""
    if not conf.get("host"):
        raise SpecError(path, "target-conf.host", "missing: the board's address (a kind linux target is "
                        "reached over SSH)")
    if (conf.get("devlib") or {}).get("platform"):
        raise SpecError(path, "target-conf.devlib.platform", "lisa-ext sets devlib's platform of an SSH "
                        "target itself (it checks the host key of every connection): remove this key")


@dataclass(frozen=True)
class TargetConfig:
    """One target config file, checked: what LISA reads and what lisa-ext adds."""

    path: Path
    kind: str
    """LISA's kind: ``host``, ``linux`` or ``android``."""
    conf: dict = field(repr=False)
    """The ``target-conf`` mapping, as plain data."""
    extras: dict = field(default_factory=dict)
    """The ``lisa-ext:`` settings (reset command, probe timing)."""

    @classmethod
    def load(cls, path: str | os.PathLike) -> "TargetConfig":
        """Read and check a target config; any problem is one :class:`SpecError`."""
        path = Path(path).resolve()
        doc = load_yaml(path, "target config")
        if not isinstance(doc, dict) or "target-conf" not in doc:
            raise SpecError(path, "target-conf", "missing: a LISA target config has a top-level "
                            "'target-conf' mapping (and optionally 'platform-info')")
        for key in doc:
            if key not in _TOP_KEYS:
                raise SpecError(path, str(key), f"unknown key; allowed here: {', '.join(_TOP_KEYS)}")
        lisa_target = import_lisa("lisa.target")
        _check_level(path, doc["target-conf"], lisa_target.TargetConf.STRUCTURE, "target-conf")
        _check_hostile_values(path, doc["target-conf"])
        _check_tools(path, doc["target-conf"])
        if "platform-info" in doc:
            platinfo = import_lisa("lisa.platforms.platinfo")
            _check_level(path, doc["platform-info"], platinfo.PlatformInfo.STRUCTURE, "platform-info")
        extras = check_mapping(path, doc["lisa-ext"], "lisa-ext", _EXTRA_SCHEMA) if "lisa-ext" in doc else {}
        conf = _plain(doc["target-conf"])
        kind = conf.get("kind")
        if kind not in KINDS:
            raise SpecError(path, "target-conf.kind", f"{kind!r} is not one of: {', '.join(KINDS)}")
        if kind == "linux":
            _check_ssh(path, conf)
        elif kind == "host":
            _check_host(path, conf)
        return cls(path, kind, conf, _plain(extras))

    @property
    def description(self) -> str | None:
        """How pages name this platform (``lisa-ext: description``); None: by its name."""
        return self.extras.get("description")

    @property
    def scratch_devices(self) -> tuple[str, ...]:
        """Block devices of the target whose data a workload may destroy (``lisa-ext:
        scratch-devices``); no other device is ever written."""
        return tuple(self.extras.get("scratch-devices") or ())

    @property
    def name(self) -> str:
        return str(self.conf.get("name") or self.path.stem)

    def ssh_endpoint(self) -> Endpoint:
        """The SSH login a ``linux`` config names, checked against the project's known_hosts."""
        host, port = str(self.conf["host"]), int(self.conf.get("port") or 22)
        keyfile = self.conf.get("keyfile")
        return Endpoint(host, port, str(self.conf.get("username") or "root"),
                        Trust.for_host(host, port, pin_hint=f"lisa-ext target trust {self.path}"),
                        keyfile=Path(keyfile).expanduser() if keyfile else None,
                        password=self.conf.get("password"))

    def lisa_conf(self, endpoint: Endpoint | None = None):
        """LISA's :class:`lisa.target.TargetConf` of this config, logging in as ``endpoint`` says
        (the virtual board's port and key come from its cache, not from the file)."""
        conf = import_lisa("lisa.target").TargetConf(dict(self.conf))
        if endpoint is not None:
            login = {"host": endpoint.host, "port": endpoint.port, "username": endpoint.username}
            if endpoint.keyfile is not None:
                login["keyfile"] = str(endpoint.keyfile)
            conf.add_src("lisa-ext SSH login", login)
        return conf


def _plain(node: Any) -> Any:
    """ruamel's commented containers and scalar types -> plain JSON-able Python."""
    return json.loads(json.dumps(node, default=str))
