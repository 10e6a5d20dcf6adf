"""Large files read a piece at a time: ``ast.parse`` and ``compile`` over runs of top-level statements.

A whole-file syntax tree costs about 165 MiB per MB of source (``ast.parse`` of a 4.19 MB file:
691 MiB peak, 606 MiB held by the tree), and even ``compile()``, which builds no Python objects,
peaks at 506 MiB there (CPython's parser arena). What kcheck needs of a file that no rule selects
is small: the project index's facts (:mod:`kcheck.project`), whether the text compiles, and (for a
file with suppression comments) whether it parses. Above :data:`LARGE_FILE_BYTES` those are
computed per chunk of about :data:`CHUNK_BYTES` of consecutive top-level statements, each chunk
parsed, read and dropped before the next: the whole run on that file peaks at 68 MiB
(``benchmarks/results/large_file.md``).

Where a chunk may start (:func:`cuts`): at a line that begins in column 0 with a name, a keyword or
a decorator, outside a string literal that spans lines, not ``else``/``elif``/``except``/
``finally`` (the rest of a compound statement), not a ``from __future__`` import, and not a ``def``,
``class`` or decorator under a decorator. The test reads the text, not the tokens, so it can still
be wrong (a column-0 line inside brackets or after a backslash continuation); the parse tells. A
chunk that starts where a statement starts and parses on its own ends outside any string or bracket
(the tokenizer reads the same characters as in the whole file, and a string or bracket still open at
the end is an error), so the next chunk starts where a statement starts too: when every chunk
parses, the file is a run of whole statements and parses too. (``compile`` also checks what spans
statements: each chunk after the first is compiled after a statement, so that a misplaced ``from
__future__`` import fails there as in the file, and with the first chunk's future features; a file
with a module-level ``global`` is compiled whole.) A chunk that does not parse is retried joined to
the next ones (:data:`RETRIES`); when it still fails (a real syntax error, or no cut that works) the
callers do what they do for a small file: one whole-file ``ast.parse`` or ``compile``, which reports
the error exactly as before, at its line. So the answers are the same with chunks on and off; only
the memory differs.

Line numbers: with ``lines`` (:func:`trees`) a chunk is parsed after as many blank lines as precede
it in the file (cheap for CPython's tokenizer), so its nodes carry their true ``lineno``.

The rules: a file some rule still wants after its text prefilter is read whole up to
:data:`WHOLE_FILE_LIMIT` (the gates look at the whole ``ast`` tree, :func:`kcheck.gate.summarize`,
and libcst parses the whole text, about 0.5 GB per MB). Above it the rules read it a chunk of about
:data:`RULE_CHUNK_BYTES` at a time (``engine._check_in_chunks``): each chunk, with the file's
top-level imports (:func:`imports`) appended so that its names resolve as in the file, is gated,
parsed by libcst, checked and dropped; its findings keep their lines. What spans chunks is not seen
there (a same-module helper or kernel defined in another chunk), so a file that large may get
fewer findings than it would whole; generated files (tables, tuning code) rarely reach across. A
file that does not parse (with this interpreter's grammar, or in chunks) is read whole, and libcst's
whole-file parse then bounds the run.
"""

from __future__ import annotations

import __future__
import ast
import re
import warnings
from typing import Callable, TypeVar

# Files above this many characters are read in chunks. Below it a whole-file tree peaks under
# ~90 MiB and the chunks would save little (benchmarks/results/large_file.md).
LARGE_FILE_BYTES = 256 * 1024
# About how many characters one chunk holds: the tree of one is ~20 MiB.
CHUNK_BYTES = 128 * 1024
# Files above this many characters go through the rules a chunk at a time (engine._check_in_chunks):
# libcst holds about 0.5 GB per MB of source. Below it the rules see the whole module.
WHOLE_FILE_LIMIT = 1024 * 1024
# About how many characters one chunk holds when the rules read it: libcst's tree of one is ~130 MiB.
RULE_CHUNK_BYTES = 256 * 1024
# How many following chunks a chunk that does not parse is joined to before giving up.
RETRIES = 2

T = TypeVar("T")

# the start of a line in column 0 with a name, a keyword or a decorator: where a top-level statement
# may start
_LINE_START = re.compile(r"\n(?=[A-Za-z_@])")
# the rest of a compound statement, never a statement of its own; and a future import, which must
# stay with the start of the file
_CONTINUES = re.compile(r"(?:else|elif|except|finally)\b|from[ \t]+__future__\b")
_DEFINITION = re.compile(r"(?:def|class|async)\b")
# module-level ``global``: the symbol table checks it against the statements before it, which may
# be in an earlier chunk; such a file is compiled whole
_MODULE_GLOBAL = re.compile(r"^global\b", re.MULTILINE)
# string literals and comments, left to right as the tokenizer reads them (a quote in a comment and a
# ``#`` in a string are neither), whatever their prefix; an approximation (a PEP 701 f-string with
# the same quotes nested is misread) that only chooses where to try a cut: the parse checks it
_STRING_OR_COMMENT = re.compile(
    r"#[^\r\n]*"
    r'|"""[^"\\]*(?:(?:\\[\s\S]|"(?!""))[^"\\]*)*(?:"""|\Z)'
    r"|'''[^'\\]*(?:(?:\\[\s\S]|'(?!''))[^'\\]*)*(?:'''|\Z)"
    r'|"[^"\\\r\n]*(?:\\[\s\S][^"\\\r\n]*)*"?'
    r"|'[^'\\\r\n]*(?:\\[\s\S][^'\\\r\n]*)*'?")
_ERRORS = (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError)


def is_large(text: str | bytes) -> bool:
    return len(text) > LARGE_FILE_BYTES


def is_whole_too_large(text: str | bytes) -> bool:
    """Whether the rules read ``text`` in chunks (above :data:`WHOLE_FILE_LIMIT`)."""
    return len(text) > WHOLE_FILE_LIMIT


def line_count(text: str) -> int:
    """Line breaks in ``text`` as CPython's tokenizer counts them."""
    return _lines(text)


def imports(text: str) -> str | None:
    """The file's top-level import statements (``from __future__`` ones left out), one per line:
    what a chunk needs beside it for its names to resolve as in the file. None when the text does
    not parse in chunks."""
    def found(piece: str, line: int, first: bool) -> list[str]:
        return [ast.unparse(n) for n in parse(piece).body
                if type(n) is ast.Import or type(n) is ast.ImportFrom and n.module != "__future__"]

    parts = each(text, found)
    return None if parts is None else "".join(f"{code}\n" for part in parts for code in part)


def _after_decorator(text: str, start: int) -> bool:
    """Whether the line at ``start`` (in column 0) is a ``def``/``class`` or another decorator under a
    decorator: the last line before it that starts in column 0 with code, skipping blank, comment and
    indented lines and closing brackets (a decorator's arguments over several lines), starts with
    ``@`` (a few hundred lines looked at, at most)."""
    if not (text.startswith("@", start) or _DEFINITION.match(text, start)):
        return False
    end = start - 1
    for _ in range(256):
        if end <= 0:
            return False
        begin = text.rfind("\n", 0, end) + 1
        first = text[begin] if begin < end else "\n"
        if first not in " \t\f\r\n#)]}":
            return first == "@"
        end = begin - 1
    return False


def cuts(text: str, chunk: int | None = None) -> list[int]:
    """The offsets where chunks start, 0 first: the first possible statement start at or after
    every ``chunk`` characters (default :data:`CHUNK_BYTES`), outside the string literals that
    :data:`_STRING_OR_COMMENT` finds (a docstring's lines in column 0)."""
    size = chunk or CHUNK_BYTES
    out = [0]
    pos = size
    literals = _STRING_OR_COMMENT.finditer(text)
    literal = next(literals, None)
    while pos < len(text):
        m = _LINE_START.search(text, pos)
        if m is None:
            break
        start = m.end()
        while literal is not None and literal.end() <= start:
            literal = next(literals, None)
        if literal is not None and literal.start() < start:  # inside a string that spans lines
            pos = literal.end()
            continue
        if _CONTINUES.match(text, start) or _after_decorator(text, start):
            pos = start
            continue
        out.append(start)
        pos = start + size
    return out


def _lines(text: str) -> int:
    """Line breaks in ``text`` as CPython's tokenizer counts them (``\\n``, ``\\r\\n``, a lone ``\\r``)."""
    return text.count("\n") + text.count("\r") - text.count("\r\n")


def each(text: str, fn: Callable[[str, int, bool], T], chunk: int | None = None) -> list[T] | None:
    """``fn(piece, first_line, is_first)`` for each chunk of ``text`` in order, or None when a chunk
    fails (``fn`` raises SyntaxError, ValueError, RecursionError, MemoryError) even joined to the
    :data:`RETRIES` chunks after it: the caller then reads the file whole."""
    offsets = [*cuts(text, chunk), len(text)]
    out: list[T] = []
    i, line = 0, 1
    while i < len(offsets) - 1:
        for j in range(i + 1, min(i + 2 + RETRIES, len(offsets))):
            piece = text[offsets[i]:offsets[j]]
            try:
                result = fn(piece, line, i == 0)
            except _ERRORS:
                continue
            break
        else:
            return None
        out.append(result)
        line += _lines(piece)
        i = j
    return out


def parse(piece: str, line: int = 1) -> ast.Module:
    """``ast.parse`` of a chunk starting at ``line`` of its file, nodes at their true lines."""
    with warnings.catch_warnings():  # SyntaxWarnings about the scanned code are not kcheck's to print
        warnings.simplefilter("ignore")
        return ast.parse("\n" * (line - 1) + piece if line > 1 else piece)


def trees(text: str, fn: Callable[[ast.Module], T], chunk: int | None = None, lines: bool = True) -> list[T] | None:
    """``fn(tree)`` for the tree of each chunk of ``text``, each tree dropped before the next is
    parsed; None when the text does not parse in chunks (see :func:`each`). With ``lines`` the nodes
    carry their true line numbers; without, each chunk's count from 1 (what needs no line number
    saves the blank lines)."""
    return each(text, lambda piece, line, first: fn(parse(piece, line if lines else 1)), chunk)


# future features that change what compiles (``annotations`` rejects a walrus or ``yield`` in an
# annotation); ``barry_as_FLUFL`` is left out: the parser does not take it from the source
_FUTURES = [getattr(__future__, name).compiler_flag for name in __future__.all_feature_names
            if name != "barry_as_FLUFL" and getattr(__future__, name).compiler_flag]


def compiles(text: str, filename: str = "<unknown>", chunk: int | None = None) -> bool:
    """Whether every chunk of ``text`` compiles, and so the whole text does. False also when the
    answer needs the whole text (a module-level ``global``, a cut that does not work): the caller
    then compiles it whole.

    Each chunk after the first is compiled after one expression statement, so a ``from __future__``
    import at its start is rejected as it is in the file, and with the future features the first
    chunk turned on."""
    if _MODULE_GLOBAL.search(text):
        return False
    flags = [0]

    def one(piece: str, line: int, first: bool) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if first:
                code = compile(piece, filename, "exec", dont_inherit=True)
                for flag in _FUTURES:
                    if code.co_flags & flag:
                        flags[0] |= flag
            else:
                compile("0\n" + piece, filename, "exec", flags=flags[0], dont_inherit=True)

    return each(text, one, chunk) is not None
