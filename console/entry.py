"""The ``inferdeck`` command's first step: the garbage collector held off while start-up imports
the console (modules, classes, pydantic's validators: objects that live as long as the process,
which a collection can only walk, never free; about a tenth of the import time). It is switched
back on before any command runs; the console's own screen holds it off until its first frame is
drawn, then freezes what start-up built (``screens.app``)."""

from __future__ import annotations

import gc


def main() -> int:
    gc.disable()
    try:
        from console.cli import main as run
    finally:
        gc.enable()
    return run()
