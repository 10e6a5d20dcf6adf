"""Output formats. Each format is a module here with ``render(findings, ctx) -> str``.

``--output-format NAME[:FILE]`` may be given several times; :func:`write_all` renders each
format once and writes it to its file (atomically) or to stdout.

Reporters receive every finding the scan produced, in-source suppressed ones included (marked
by ``Finding.suppressed``); findings hidden by the diff filter or the baseline are not among them
but in ``ReportContext.hidden``, each with the reason it is hidden.
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
    "json-lines": "json",
    "sarif": "sarif",
    "github": "github",
    "rdjson": "rdjson",
    "rdjsonl": "rdjson",
    "markdown": "markdown",
    "junit": "junit",
}

# Why a finding is in ReportContext.hidden.
OUTSIDE_DIFF = "outside-diff"
BASELINED = "baselined"


@dataclass
class ReportContext:
    """What a reporter may need besides the findings."""

    root: Path = field(default_factory=Path.cwd)
    cwd: Path = field(default_factory=Path.cwd)
    docs_url: str = DEFAULT_DOCS_URL
    files: int = 0
    hidden: list[tuple[Finding, str]] = field(default_factory=list)  # (finding, OUTSIDE_DIFF or BASELINED)
    format: str = "concise"
    _repo_root: Path | None = field(default=None, repr=False)
    _lines: dict[str, list[str]] = field(default_factory=dict, repr=False)

    def display_path(self, finding: Finding) -> str:
        """The path as the user should click it: relative to the current folder."""
        absolute = self.root / finding.path
        try:
            return os.path.relpath(absolute, self.cwd)
        except ValueError:
            return str(absolute)

    @property
    def repo_root(self) -> Path:
        """The top of the git work tree that holds ``root`` (``root`` itself outside git)."""
        if self._repo_root is None:
            from kcheck.diff import git_toplevel

            self._repo_root = git_toplevel(self.root) or self.root
        return self._repo_root

    def repo_path(self, finding: Finding) -> str:
        """The path relative to the repository's top, forward slashes: what GitHub, SARIF and
        reviewdog expect (the project root may be a subfolder of the repository)."""
        if self.repo_root == self.root:
            return finding.path
        return Path(os.path.relpath(self.root / finding.path, self.repo_root)).as_posix()

    def source_lines(self, finding: Finding) -> list[str]:
        """The lines of the finding's file (empty when it cannot be read); cached per path."""
        if finding.path not in self._lines:
            try:
                text = (self.root / finding.path).read_text(encoding="utf-8", errors="replace")
            except OSError:
                text = ""
            self._lines[finding.path] = text.splitlines()
        return self._lines[finding.path]


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
