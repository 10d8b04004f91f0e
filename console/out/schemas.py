"""JSON Schemas of what inferdeck reads and writes: the config file and the Frame.

``inferdeck schema config > inferdeck.schema.json`` and a first line
``# yaml-language-server: $schema=inferdeck.schema.json`` in config.yaml give an editor completion
and checks of every key; ``inferdeck schema frame`` describes ``snapshot --format json``, each
bundle's frame.json and each recorded frame (pydantic writes both from the records themselves).
"""

from __future__ import annotations

import json
from typing import Any

from console import __version__

KINDS = (
    "config",
    "frame",
    "timeline",
    "check",
    "fleet-check",
    "fleet-snapshot",
    "mig-show",
    "mig-layouts",
    "plan",
)


def schema(kind: str) -> dict[str, Any]:
    if kind == "config":
        from console.settings import Settings

        out = Settings.model_json_schema()
        title = "inferdeck config file (config.yaml)"
    elif kind == "frame":
        from console.frame import SCHEMA, Frame

        out = Frame.model_json_schema(by_alias=True)
        title = f"inferdeck Frame ({SCHEMA}): snapshot --format json, frame.json, recordings"
    elif kind == "timeline":
        from console.frame import TIMELINE_SCHEMA, Timeline

        out = Timeline.model_json_schema(by_alias=True)
        title = f"inferdeck timeline ({TIMELINE_SCHEMA}): timeline --format json"
    else:
        from console.out.jsondocs import DOCS

        record = DOCS[kind]
        out = record.model_json_schema(by_alias=True)
        title = f"inferdeck {kind} --format json"
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": title,
        "$comment": f"written by inferdeck {__version__}",
        **{k: v for k, v in out.items() if k != "title"},
    }


def print_schema(kind: str) -> int:
    print(json.dumps(schema(kind), indent=2))
    return 0
