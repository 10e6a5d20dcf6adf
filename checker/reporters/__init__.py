"""Output formats. Each format is a module here with ``render(findings, ctx) -> str``.

``--output-format NAME[:FILE]`` may be given several times; :func:`write_all` renders each
format once and writes it to its file (atomically) or to stdout.
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from kcheck.finding import DEFAULT_DOCS_URL, Finding

# format name -> module under kcheck.reporters
FORMATS = {
    "concise": "text",
    "full": "text",
    "json": "json",
}


@dataclass
class ReportContext:
    """What a reporter may need besides the findings."""

    root: Path = field(default_factory=Path.cwd)
    cwd: Path = field(default_factory=Path.cwd)
    docs_url: str = DEFAULT_DOCS_URL
    files: int = 0
    hidden: list[Finding] = field(default_factory=list)  # found, but outside the diff or baselined
    format: str = "concise"

    def display_path(self, finding: Finding) -> str:
        """The path as the user should click it: relative to the current folder."""
        absolute = self.root / finding.path
        try:
            return os.path.relpath(absolute, self.cwd)
        except ValueError:
            return str(absolute)


def parse_spec(spec: str) -> tuple[str, str | None]:
    """``sarif:out.sarif`` -> ("sarif", "out.sarif"); ``github`` -> ("github", None)."""
    name, sep, target = spec.partition(":")
    return name.strip(), (target if sep else None)


def render(name: str, findings: list[Finding], ctx: ReportContext) -> str:
    module = importlib.import_module(f"kcheck.reporters.{FORMATS[name]}")
    ctx.format = name
    return module.render(findings, ctx)


def write_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file: never half-written."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise


def write_all(specs: list[tuple[str, str | None]], findings: list[Finding], ctx: ReportContext) -> None:
    for name, target in specs:
        text = render(name, findings, ctx)
        if target:
            write_atomic(target, text)
        elif text:
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
