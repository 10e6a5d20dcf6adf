"""Where kcheck's data lives: inside the installed wheel, or at the root of a checkout."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


@lru_cache(maxsize=None)
def data_dir(name: str) -> Path:
    """Return the folder `name` (``knowledge`` or ``schemas``) that ships with kcheck.

    In a wheel the folders sit inside the package (``kcheck/knowledge``); in a checkout, or an
    editable install, they sit beside ``checker/`` at the repository root.
    """
    for candidate in (PACKAGE_DIR / name, PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"kcheck data folder {name!r} not found next to {PACKAGE_DIR}")
