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
NOT_CHECKED = "not-checked"  # not a finding: a file kcheck did not check (too large, a non-Python notebook)


class OutputError(Exception):
    """An output file that cannot be written; the message names the file and the reason."""


def not_checked(path: str, why: str, docs_url: str = DEFAULT_DOCS_URL) -> Finding:
    """A file kcheck did not check, as the notice every format carries (``hidden`` as
    :data:`NOT_CHECKED`: it never counts for the exit code)."""
    from kcheck.finding import rule_url

    return Finding(code="KC900", name="unparsable-file", message=f"not checked: {why}", severity="info",
                   path=path, line=1, column=1, end_line=1, end_column=1,
                   url=rule_url("unparsable-file", docs_url))


@dataclass
class ReportContext:
    """What a reporter may need besides the findings."""

    root: Path = field(default_factory=Path.cwd)
    cwd: Path = field(default_factory=Path.cwd)
    docs_url: str = DEFAULT_DOCS_URL
    files: int = 0
    hidden: list[tuple[Finding, str]] = field(default_factory=list)  # (finding, OUTSIDE_DIFF, BASELINED or NOT_CHECKED)
    format: str = "concise"
    quiet: bool = False  # ``-q``: no summary line
    color: bool = False  # ANSI colours (a terminal, unless NO_COLOR)
    sarif_rules: str = "all"  # ``all`` rules described in SARIF, or only those ``fired``
    preview_off: int = 0  # selected preview rules that did not run (previews off): the summary says so
    _repo_root: Path | None = field(default=None, repr=False)
    _lines: dict[str, list[str]] = field(default_factory=dict, repr=False)
    _cells: dict[str, dict[int, list[str]]] = field(default_factory=dict, repr=False)

    def display_path(self, finding: Finding) -> str:
        """The path as the user should click it: relative to the current folder."""
        absolute = self.root / finding.path
        try:
            return os.path.relpath(absolute, self.cwd)
        except ValueError:
            return str(absolute)

    @property
    def not_checked(self) -> list[Finding]:
        return [f for f, why in self.hidden if why == NOT_CHECKED]

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

    def lines_of(self, finding: Finding) -> list[str]:
        """The lines ``finding.line`` counts: its cell's in a notebook, else its file's."""
        if not finding.cell:
            return self.source_lines(finding)
        key = f"{finding.path}\0cells"
        if key not in self._cells:
            from kcheck.notebook import cell_lines

            self._cells[key] = cell_lines("\n".join(self.source_lines(finding)))
        return self._cells[key].get(finding.cell, [])

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
    """``sarif:out.sarif`` -> ("sarif", "out.sarif"); ``github`` and ``json:-`` -> (name, None): stdout."""
    name, sep, target = spec.partition(":")
    return name.strip(), (target if sep and target != "-" else None)


def render(name: str, findings: list[Finding], ctx: ReportContext) -> str:
    module = importlib.import_module(f"kcheck.reporters.{FORMATS[name]}")
    ctx.format = name
    return module.render(findings, ctx)


def _mode_for(target: Path) -> int:
    """The permissions a plain ``open(path, "w")`` would give: an existing file keeps its own, a
    new one gets 0o666 less the umask (``mkstemp`` alone would leave 0o600)."""
    try:
        return target.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file: never half-written. OutputError names
    the path and the reason when it cannot be written."""
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        mode = _mode_for(target)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    except OSError as exc:
        raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as exc:
        _remove(tmp)
        raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from None
    except BaseException:
        _remove(tmp)
        raise


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def write_all(specs: list[tuple[str, str | None]], findings: list[Finding], ctx: ReportContext,
              rendered: dict[str, str] | None = None) -> None:
    """Render each format and write it to its file or stdout (``rendered``: text to use instead
    of rendering, by format name, for stdout only: ``--statistics``)."""
    for name, target in specs:
        if target is None and rendered is not None and name in rendered:
            text = rendered[name]
        else:
            text = render(name, findings, ctx)
        if target:
            write_atomic(target, text)
        elif text:
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
