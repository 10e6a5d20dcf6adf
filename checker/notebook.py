"""Jupyter notebooks, checked cell by cell as ruff does.

The code cells of a notebook (nbformat 4) are joined into one Python text, the checks run over it
as over any file, and each finding is placed back in its cell: ``Finding.cell`` is the cell's
1-based position among *all* cells of the notebook (markdown cells count, as in ruff and as a
reader counts them on screen), and ``line``/``column`` are relative to that cell. Text output
reads ``nb.ipynb:cell 3:5:1: ...``; JSON carries ``"cell": 3`` next to ``location``.

IPython syntax that is not Python is replaced, line for line, by a harmless ``pass`` at the same
indentation, so every other line keeps its number: line magics (``%time f(x)``), shell escapes
(``!nvidia-smi``, ``files = !ls``), help (``obj?``) and their backslash continuations. A line
counts as a magic only where a statement may start: one inside a string or brackets is Python and
stays. A cell whose first line is a cell magic is left out, unless its body is Python run in
place (``%%time``, ``%%timeit``, ``%%capture``, ``%%prun``, ``%%python``, ...), in which case only
the magic's line is replaced. Nothing in the notebook is imported or run.
"""

from __future__ import annotations

import bisect
import io
import json
import re
import tokenize
from dataclasses import dataclass, field, replace

# cell magics whose body is Python run in this kernel: the body is checked
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug", "python", "python3", "pypy"})

_ASSIGN_MAGIC = re.compile(r"^[\w.\[\], ]+=\s*[%!]")  # files = !ls, t = %timeit -o f(x)
_HELP = re.compile(r"^(\?{1,2}[\w.]+|[\w.]+\?{1,2})$")  # ?obj, obj?, obj??
PLACEHOLDER = "pass"


class NotebookError(ValueError):
    """A notebook kcheck cannot read; ``line``/``column`` place the problem in the file's JSON."""

    def __init__(self, message: str, line: int = 1, column: int = 1) -> None:
        super().__init__(message)
        self.line, self.column = line, column


class NotPython(Exception):
    """A notebook whose kernel is not Python: not checked, and said so."""


@dataclass
class Notebook:
    source: str  # the code cells joined, magics replaced
    starts: list[int] = field(default_factory=list)  # first line (1-based, in ``source``) of each included cell
    cells: list[int] = field(default_factory=list)  # its cell number (1-based, among all cells)
    sizes: list[int] = field(default_factory=list)  # its number of lines
    lines: dict[int, list[str]] = field(default_factory=dict)  # cell number -> its original lines

    def locate(self, line: int) -> tuple[int, int]:
        """(cell, line in the cell) of a line of ``source``."""
        if not self.starts:
            return 1, 1
        i = max(0, bisect.bisect_right(self.starts, line) - 1)
        within = line - self.starts[i] + 1
        return self.cells[i], max(1, min(within, self.sizes[i] or 1))

    def place(self, finding):
        """``finding`` (positions in ``source``) at its cell and the line within that cell."""
        cell, line = self.locate(finding.line)
        end_cell, end_line = self.locate(finding.end_line)
        end_column = finding.end_column
        if end_cell != cell or finding.end_line < finding.line:  # never spans cells: end at its cell's last line
            end_line = self.sizes[self.cells.index(cell)] if self.cells else line
            text = self.lines.get(cell, [])
            end_column = len(text[end_line - 1]) + 1 if 0 < end_line <= len(text) else finding.column
        return replace(finding, cell=cell, line=line, end_line=end_line, end_column=end_column)


def _cell_text(cell: dict, number: int) -> str:
    source = cell.get("source", "")
    if isinstance(source, list) and all(isinstance(part, str) for part in source):
        source = "".join(source)
    if not isinstance(source, str):
        raise NotebookError(f"cell {number}: \"source\" must be a string or a list of strings")
    return source.replace("\r\n", "\n").replace("\r", "\n")


def _language(nb: dict) -> str:
    meta = nb.get("metadata")
    if not isinstance(meta, dict):
        return "python"
    for key, field_name in (("language_info", "name"), ("kernelspec", "language")):
        info = meta.get(key)
        if isinstance(info, dict) and isinstance(info.get(field_name), str) and info[field_name]:
            return info[field_name].lower()
    return "python"


def load(text: str) -> Notebook:
    """The Python text of a notebook's code cells and where each cell sits in it.

    NotebookError says why a file is not a notebook kcheck can read; NotPython that its kernel
    runs another language."""
    try:
        nb = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NotebookError(f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})",
                            exc.lineno, exc.colno) from None
    except (ValueError, RecursionError) as exc:
        raise NotebookError(f"not valid JSON: {exc}") from None
    if not isinstance(nb, dict):
        raise NotebookError("not a notebook: the JSON is not an object")
    cells = nb.get("cells")
    if not isinstance(cells, list):
        version = nb.get("nbformat")
        hint = f" (nbformat {version}; kcheck reads nbformat 4)" if version not in (None, 4) else ""
        raise NotebookError(f"not a notebook: no \"cells\" list{hint}")
    language = _language(nb)
    if language not in ("python", "python3", "ipython", "ipython3"):
        raise NotPython(f"a {language} notebook: kcheck checks Python notebooks only")
    out = Notebook(source="")
    parts: list[str] = []
    line = 1
    for number, cell in enumerate(cells, 1):
        if not isinstance(cell, dict):
            raise NotebookError(f"cell {number} is not an object")
        if cell.get("cell_type") != "code":
            continue
        text = _cell_text(cell, number)
        if not text.strip():
            continue
        original = text.split("\n")
        if original and original[-1] == "":
            original.pop()
        code = _python_lines(original)
        if code is None:  # a cell magic that runs something other than this Python kernel
            continue
        out.starts.append(line)
        out.cells.append(number)
        out.sizes.append(len(code))
        out.lines[number] = original
        parts.append("\n".join(code) + "\n")
        line += len(code)
    out.source = "".join(parts)
    return out


def _is_magic(stripped: str) -> bool:
    return stripped.startswith(("%", "!")) or bool(_ASSIGN_MAGIC.match(stripped)) or bool(_HELP.match(stripped))


def _python_lines(lines: list[str]) -> list[str] | None:
    """The cell's lines with IPython syntax replaced, one line for one; None for a cell to skip."""
    code = list(lines)
    first = next((i for i, text in enumerate(code) if text.strip()), None)
    if first is not None and code[first].lstrip().startswith("%%"):
        name = code[first].lstrip()[2:].split(None, 1)
        if not name or name[0] not in PYTHON_CELL_MAGICS:
            return None
        code[first] = PLACEHOLDER
    magic: dict[int, str] = {}  # index -> original text, for lines replaced
    i = 0
    while i < len(code):
        text = code[i]
        stripped = text.strip()
        if stripped and i not in magic and _is_magic(stripped) and not (i == first and stripped == PLACEHOLDER):
            indent = text[: len(text) - len(text.lstrip())]
            while True:  # a magic continues over lines ending with a backslash
                magic[i] = code[i]
                code[i] = indent + PLACEHOLDER
                if not magic[i].rstrip().endswith("\\") or i + 1 >= len(code):
                    break
                i += 1
        i += 1
    if magic:
        for i in _not_statement_starts(code, magic):
            code[i] = magic[i]  # inside a string or brackets: Python after all
    return code


def _not_statement_starts(code: list[str], candidates: dict[int, str]) -> list[int]:
    """The candidates (0-based lines) that do not begin a statement: a line inside a string,
    brackets or a continuation. Where the text stops tokenizing (an unclosed string: the parse
    reports it), the lines past the last token read stay magics."""
    starts: set[int] = set()
    continued: set[int] = set()
    text = "\n".join(code) + "\n"
    at_start = True
    last = 0  # the last line (0-based) a token reached
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            last = tok.end[0] - 1
            if tok.type in (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
                continue
            if tok.type == tokenize.NEWLINE:
                at_start = True
                continue
            if at_start:
                starts.add(tok.start[0] - 1)
                at_start = False
            if tok.end[0] > tok.start[0]:  # a string over several lines: the lines after its first
                continued.update(range(tok.start[0], tok.end[0]))
    except (tokenize.TokenError, SyntaxError):
        pass
    return [i for i in candidates if i <= last and (i not in starts or i in continued)]


def check(text: str, rel: str, config, shortcuts: bool = True, config_rel: str = ""):
    """The findings of one notebook's text, each placed in its cell (a :class:`FileResult`)."""
    from kcheck.engine import FileResult, _meta_finding, check_source

    try:
        nb = load(text)
    except NotPython as exc:
        return FileResult(skipped=str(exc))
    except NotebookError as exc:
        return FileResult(findings=[_meta_finding("KC900", f"cannot read notebook: {exc}", rel, exc.line,
                                                  exc.column, config)])
    result = check_source(nb.source, rel, config, shortcuts, config_rel)
    result.findings = [nb.place(f) for f in result.findings]
    return result


def cell_lines(text: str) -> dict[int, list[str]]:
    """Cell number -> the original lines of each code cell checked ({} when it cannot be read)."""
    try:
        return load(text).lines
    except (NotebookError, NotPython):
        return {}
