"""The real servers of tests/python (tests/python/servers.py) for the experiments that read
object storage."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))

from servers import s3, s3_server  # noqa: E402,F401  (fixtures)
