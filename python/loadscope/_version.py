"""The version, in one place: the package, its metadata (pyproject reads it) and `loadscope --version`."""

import json
import os
from typing import Any, Dict, Optional

__version__ = "0.1.0"


def carried_libraries() -> Optional[Dict[str, Any]]:
    """What a wheel made by `make wheel` carries, from its THIRD-PARTY.json (scripts/wheel-notice.py):
    ``{"wheel": file name, "notice": path of THIRD-PARTY.md, "libraries": {project: version}}``.
    None for an install built from source, which uses the system's libraries."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        with open(os.path.join(here, "THIRD-PARTY.json")) as f:
            notice = json.load(f)
    except (OSError, ValueError):
        return None
    return {"wheel": notice.get("wheel"), "notice": os.path.join(here, "THIRD-PARTY.md"),
            "libraries": {e["project"]: e["version"] for e in notice.get("libraries", [])}}
