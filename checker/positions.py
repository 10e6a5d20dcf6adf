"""Line and column of reported libcst nodes, read off the ``ast`` tree the engine already has.

libcst keeps no positions in its nodes; its ``PositionProvider`` regenerates the whole file to
compute them, which costs about four parses. Every file the engine parses with libcst was
already parsed with ``ast``, whose nodes carry positions. Both trees list the nodes of a kind
(calls, attributes, statements, ...) in the same source order, so the n-th ``cst.Call`` is the
n-th ``ast.Call``. When that correspondence does not hold for a kind (counts differ), or a
reported node has no ``ast`` counterpart, the file falls back to ``PositionProvider``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

import libcst as cst

from kcheck.model import children

# libcst node type -> the ast node types that correspond one to one
KINDS: dict[type, tuple[type, ...]] = {
    cst.Call: (ast.Call,),
    cst.Attribute: (ast.Attribute,),
    cst.Subscript: (ast.Subscript,),
    cst.Comparison: (ast.Compare,),
    cst.BinaryOperation: (ast.BinOp,),
    cst.Lambda: (ast.Lambda,),
    cst.FunctionDef: (ast.FunctionDef, ast.AsyncFunctionDef),
    cst.ClassDef: (ast.ClassDef,),
    cst.Assert: (ast.Assert,),
    cst.Raise: (ast.Raise,),
    cst.Return: (ast.Return,),
    cst.Assign: (ast.Assign,),
    cst.AugAssign: (ast.AugAssign,),
    cst.AnnAssign: (ast.AnnAssign,),
    cst.Expr: (ast.Expr,),
    cst.If: (ast.If,),
    cst.For: (ast.For, ast.AsyncFor),
    cst.While: (ast.While,),
    cst.With: (ast.With, ast.AsyncWith),
    cst.Try: (ast.Try,),
    cst.ExceptHandler: (ast.ExceptHandler,),
    cst.Import: (ast.Import,),
    cst.ImportFrom: (ast.ImportFrom,),
}


@dataclass(frozen=True)
class Span:
    line: int  # 1-based
    column: int  # 0-based, in characters
    end_line: int
    end_column: int


def _char_col(lines: list[bytes], line: int, byte_col: int) -> int:
    if 1 <= line <= len(lines):
        return len(lines[line - 1][:byte_col].decode("utf-8", "replace"))
    return byte_col


def resolve(module: cst.Module, tree: ast.Module, source: str, nodes: list[cst.CSTNode]) -> dict[int, Span] | None:
    """Spans for ``nodes`` (keyed by ``id``), or None when the trees do not line up."""
    wanted_kinds = {type(n) for n in nodes}
    if not wanted_kinds <= KINDS.keys():
        return None
    wanted = {id(n) for n in nodes}
    ordinals: dict[int, tuple[type, int]] = {}
    counts = {k: 0 for k in wanted_kinds}
    stack: list[cst.CSTNode] = [module]
    while stack:
        node = stack.pop()
        kind = type(node)
        if type(node) not in (cst.Import, cst.ImportFrom):  # dotted module names are Attributes only in libcst
            stack.extend(reversed(children(node)))
        if kind in counts:
            if id(node) in wanted:
                ordinals[id(node)] = (kind, counts[kind])
            counts[kind] += 1
    by_kind: dict[type, list[ast.AST]] = {}
    for kind in wanted_kinds:
        targets = KINDS[kind]
        found = [n for n in ast.walk(tree) if isinstance(n, targets)]
        if len(found) != counts[kind]:
            return None
        found.sort(key=lambda n: (n.lineno, n.col_offset, -(n.end_lineno or 0), -(n.end_col_offset or 0)))
        by_kind[kind] = found
    raw = [l.encode("utf-8") for l in source.splitlines()]
    out: dict[int, Span] = {}
    for key, (kind, index) in ordinals.items():
        node = by_kind[kind][index]
        start = node.lineno  # for a decorated definition, the def line in both trees
        end_line = node.end_lineno or start
        out[key] = Span(start, _char_col(raw, start, node.col_offset), end_line,
                        _char_col(raw, end_line, node.end_col_offset or node.col_offset))
    return out


def resolve_with_libcst(module: cst.Module, nodes: list[cst.CSTNode]) -> dict[int, Span]:
    """The slow, always-right fallback."""
    from libcst.metadata import MetadataWrapper, PositionProvider

    positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    out = {}
    for n in nodes:
        pos = positions.get(n)
        if pos is not None:
            out[id(n)] = Span(pos.start.line, pos.start.column, pos.end.line, pos.end.column)
    return out
