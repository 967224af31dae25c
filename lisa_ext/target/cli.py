"""``lisa-ext target check CONF...`` and ``lisa-ext target trust CONF [--fingerprint FP]``."""

from __future__ import annotations

import argparse

from lisa_ext.ssh import HostKeyError, fingerprint, scan_host_key
from lisa_ext.target import TargetConfig, open_target

__all__ = ["register"]


def _check(args: argparse.Namespace) -> int:
    for path in args.configs:
        config = TargetConfig.load(path)
        print(f"{config.path}: ok: kind {config.kind}, name {config.name}")
    return 0


def _trust(args: argparse.Namespace) -> int:
    config = TargetConfig.load(args.config)
    if config.kind != "linux":
        print(f"{config.path}: kind {config.kind} is not reached over SSH: no host key to pin")
        return 0
    endpoint = open_target(config).endpoint
    key = scan_host_key(endpoint.host, endpoint.port)
    seen = fingerprint(key)
    print(f"{endpoint.host}:{endpoint.port} presents the {key.get_name()} host key {seen}")
    if args.fingerprint and args.fingerprint != seen:
        raise HostKeyError(f"{endpoint.host}:{endpoint.port} presented {seen}, not {args.fingerprint}: "
                           "nothing was pinned")
    trust = endpoint.trust
    if trust.pin(key):
        print(f"pinned in {trust.file} as {trust.name}")
    else:
        print(f"already pinned in {trust.file} as {trust.name}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("target", help="check target configs and pin SSH host keys",
                              description="Check target configs, and pin the SSH host key of a Linux board "
                                          "(every connection to it then accepts that key only).")
    sub = p.add_subparsers(dest="target_command", metavar="ACTION")
    sub.required = True
    check = sub.add_parser("check", help="validate target configs without connecting",
                           description="Validate target configs against LISA's keys and lisa-ext's own, "
                                       "without connecting to anything.")
    check.add_argument("configs", nargs="+", metavar="CONF", help="target config (YAML)")
    check.set_defaults(func=_check)
    trust = sub.add_parser("trust", help="print a board's SSH host key fingerprint and pin it",
                           description="Connect to the board of a target config (a key exchange only: "
                                       "nothing is sent), print its host key's fingerprint and pin it in "
                                       "the project's known_hosts ($LISA_EXT_KNOWN_HOSTS, else "
                                       "~/.config/lisa-ext/known_hosts). Compare the fingerprint with the "
                                       "board's own (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub on "
                                       "its console) before using the board.")
    trust.add_argument("config", metavar="CONF", help="target config (YAML) of kind linux")
    trust.add_argument("--fingerprint", metavar="FP",
                       help="the SHA256:... fingerprint expected: any other key is refused, nothing pinned")
    trust.set_defaults(func=_trust)
