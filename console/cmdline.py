"""Which engine a command line starts, and the port it serves metrics on (from the profiles'
`discover` section). Pure: discovery reads the command lines, linking matches processes."""

from __future__ import annotations

import os
from collections.abc import Sequence

from console.engines import profiles


def _port(argv: Sequence[str], flag: str) -> int | None:
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
        else:
            continue
        if value.isdigit():
            return int(value)
    return None


def classify(argv: Sequence[str]) -> tuple[str, int] | None:
    """(kind, metrics port) for an engine's command line, or None if it is not one."""
    names = [os.path.basename(a) for a in argv]
    for kind, prof in profiles().items():
        spec = prof.discover
        if spec is None:
            continue
        for command in spec.commands:
            n = len(command)
            for i in range(len(names) - n + 1):
                window = names[i : i + n]
                if window == command or (n == 1 and window[0].removesuffix(".py") == command[0]):
                    return kind, _port(argv, spec.port_flag) or spec.default_port
    return None
