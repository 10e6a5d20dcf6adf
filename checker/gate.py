"""The cheap first pass: an ``ast`` summary that tells the engine which files need libcst.

``ast.parse`` costs a fraction of a libcst parse, so the engine parses every candidate file with
``ast`` first, builds this summary, and asks each enabled rule's ``gate`` whether it could fire.
Only files some rule wants are parsed with libcst. The summary is deliberately coarse: a gate may
let through a file that then yields nothing, but must never turn away a file a rule would flag
(``kcheck check --no-shortcuts`` runs every rule on every file, and the tests compare the two).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Iterator


@dataclass
class FunctionSummary:
    name: str
    names: set[str] = field(default_factory=set)  # every identifier and attribute name in the body
    decorators: set[str] = field(default_factory=set)  # last component of each decorator


@dataclass
class Summary:
    """What the gates look at: functions with the names they use, classes, imports."""

    functions: list[FunctionSummary]
    module_names: set[str]  # identifiers and attributes used outside any function
    all_names: set[str]
    class_names: set[str]
    base_names: set[str]  # last component of each base class
    imports: set[str]  # imported modules and names, dotted
    path: str = ""  # the file, relative to the project root
    source: str | None = None  # the file's text, for gates that mirror a rule's test of it (None: unknown)
    tree: ast.Module | None = None  # the ast itself, for gates that look closer than names
    # every call, with the innermost function around it (None at module or class level)
    calls: list[tuple[ast.Call, FunctionSummary | None]] = field(default_factory=list)
    memo: dict = field(default_factory=dict)  # what a rule family derives once per file and shares

    def scopes(self) -> list[FunctionSummary]:
        """The functions plus the module's top level, as a pseudo-function ``<module>``."""
        return [*self.functions, FunctionSummary("<module>", self.module_names)]

    def function_names(self) -> set[str]:
        return {f.name for f in self.functions}

    def any_function(self, pred) -> bool:
        return any(pred(f) for f in self.functions)

    def reaches(self, f: FunctionSummary, wanted: set[str], depth: int = 3) -> bool:
        """Whether ``f`` or a same-module function it names (to ``depth``) uses a name in ``wanted``."""
        by_name = {g.name: g for g in self.functions}
        seen, frontier = {f.name}, [f]
        for _ in range(depth + 1):
            nxt = []
            for g in frontier:
                if g.names & wanted:
                    return True
                for callee in g.names & by_name.keys():
                    if callee not in seen:
                        seen.add(callee)
                        nxt.append(by_name[callee])
            frontier = nxt
        return False


def dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, calls in the chain printed as ``f()`` (as
    :meth:`kcheck.model.ModuleModel.dotted` prints the libcst tree)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    if isinstance(node, ast.Call):
        base = dotted(node.func)
        return f"{base}()" if base else None
    return None


def resolve(name: str | None, imports: dict[str, str]) -> str | None:
    """A dotted name with its first component resolved through an import table (local name ->
    qualified name): ``F.relu`` -> ``torch.nn.functional.relu``; ``f()`` heads keep their ``()``."""
    if name is None:
        return None
    head, _, rest = name.partition(".")
    bare = head[:-2] if head.endswith("()") else head
    if bare in imports:
        resolved = imports[bare] + ("()" if head.endswith("()") else "")
        return f"{resolved}.{rest}" if rest else resolved
    return name


def import_bindings(node: ast.Import | ast.ImportFrom) -> Iterator[tuple[str, str]]:
    """``(local name, qualified name)`` for each name an import statement binds, as the model's
    import table records them: ``import a.b`` binds ``a``, ``import a.b as c`` binds ``c`` to
    ``a.b``, ``from .m import x as y`` binds ``y`` to ``.m.x``; ``*`` binds nothing known."""
    if type(node) is ast.Import:
        for alias in node.names:
            if alias.asname:
                yield alias.asname, alias.name
            else:
                head = alias.name.split(".")[0]
                yield head, head
        return
    module = "." * node.level + (node.module or "")
    for alias in node.names:
        if alias.name != "*":
            yield alias.asname or alias.name, qualify_from(module, alias.name)


def by_name(summary) -> dict[str, list]:
    """Every ``FunctionSummary`` of the file, by function name (all definitions of a name)."""
    out = summary.memo.get("by_name")
    if out is None:
        out = summary.memo["by_name"] = {}
        for f in summary.functions:
            out.setdefault(f.name, []).append(f)
    return out


def reachable(summary, start: set[str], depth: int = 3, skip=None) -> set[str]:
    """Names of the functions named in ``start`` and of every same-module function they name, to
    ``depth`` calls: a superset of what ``ModuleModel.callee`` follows (which resolves one definition
    of a name; here every definition counts). ``skip(name)`` stops the walk at a name."""
    functions = by_name(summary)
    seen = {n for n in start if n in functions}
    frontier = list(seen)
    for _ in range(depth):
        nxt = []
        for name in frontier:
            for f in functions[name]:
                for callee in f.names & functions.keys():
                    if callee not in seen and not (skip and skip(callee)):
                        seen.add(callee)
                        nxt.append(callee)
        frontier = nxt
    return seen


# names that serving code re-exports from its own modules and that always mean the package:
# vLLM's ``from vllm.triton_utils import tl, triton`` is Triton (or a placeholder when Triton is
# missing, where nothing runs anyway)
REEXPORTED = {"triton": "triton", "tl": "triton.language"}


def qualify_from(module: str, name: str) -> str:
    """The qualified name ``from module import name`` binds (``module`` with its leading dots for a
    relative import): ``module.name``, except that a re-exported package keeps its own name."""
    if name in REEXPORTED and module != "triton" and not module.startswith("triton."):
        return REEXPORTED[name]
    dot = "." if module and not module.endswith(".") else ""
    return f"{module}{dot}{name}"


# statement kinds recorded as pseudo-names, so gates can ask "does this function assert?"
MARKERS = {ast.Assert: "<assert>", ast.Raise: "<raise>", ast.ExceptHandler: "<except>", ast.If: "<if>",
           ast.IfExp: "<if>"}


def _names(node: ast.AST) -> set[str]:
    out: set[str] = set()
    for sub in ast.walk(node):
        marker = MARKERS.get(type(sub))
        if marker:
            out.add(marker)
        if isinstance(sub, ast.Name):
            out.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            out.add(sub.attr)
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str) and len(sub.value) <= 12:
            out.add(sub.value)
    return out


def _last(node: ast.AST) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _child_fields(kind: type) -> tuple[str, ...]:
    """The fields of ``kind`` that may hold a node worth visiting, in field order: never ``ctx``
    (Load/Store) nor operators (``op``, ``ops``), which hold no code, nor fields that hold only
    strings, numbers or constants."""
    skip = {"ctx", "id", "attr", "kind", "type_comment", "level", "module", "arg", "conversion", "is_async",
            "simple", "op", "ops", "asname", "rest"}
    if kind.__name__ != "TypeAlias":  # ``type X = ...`` (3.12) names its alias with a Name node
        skip.add("name")
    if kind in (ast.Global, ast.Nonlocal):
        skip.add("names")
    if kind is ast.Constant or kind is ast.MatchSingleton:
        skip.add("value")
    return tuple(f for f in getattr(kind, "_fields", ()) if f not in skip)


_FIELDS: dict[type, tuple[str, ...]] = {}  # type -> its child fields, reversed (for a stack)
_FORWARD: dict[type, tuple[str, ...]] = {}  # type -> its child fields, in order


def stack_fields(kind: type) -> tuple[str, ...]:
    """``kind``'s child fields reversed: pushed in this order, children pop off a stack in source
    order (a pre-order walk)."""
    fields = _FIELDS.get(kind)
    if fields is None:
        fields = _FIELDS[kind] = _child_fields(kind)[::-1]
    return fields


def ast_children(node: ast.AST) -> list[ast.AST]:
    """The child nodes of ``node`` that can hold code, in order: ``ast.iter_child_nodes`` without
    the context and operator nodes, with each node type's fields looked up once."""
    kind = type(node)
    fields = _FORWARD.get(kind)
    if fields is None:
        fields = _FORWARD[kind] = _child_fields(kind)
    out: list[ast.AST] = []
    for name in fields:
        value = getattr(node, name, None)
        if type(value) is list:
            out += [v for v in value if v is not None and type(v) is not str]
        elif value is not None:
            out.append(value)
    return out


def nodes_of(summary: "Summary", *types: type) -> list[ast.AST]:
    """The file's ``ast`` nodes of these types, from one walk of its tree shared by every fact that
    asks (indexed by type in ``summary.memo``)."""
    index = summary.memo.get("nodes")
    if index is None:
        index = summary.memo["nodes"] = {}
        if summary.tree is not None:
            for node in ast.walk(summary.tree):
                index.setdefault(type(node), []).append(node)
    return [n for kind in types for n in index.get(kind, ())]


NESTED_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
"""Nodes whose code does not run where they are written."""


def ast_nodes(roots, into_scopes: bool = True) -> Iterator[ast.AST]:
    """Every node under ``roots`` (themselves included) that can hold code, in no set order; nested
    functions, classes and lambdas are yielded but not entered unless ``into_scopes``."""
    stack = list(roots)
    while stack:
        node = stack.pop()
        yield node
        if into_scopes or type(node) not in NESTED_SCOPES:
            stack += ast_children(node)


class _Leave:
    """Pushed under the children of a def or a class: popping it leaves that scope."""

    __slots__ = ("restore", "merge_into", "names")

    def __init__(self, restore: tuple, merge_into: tuple[set[str], ...], names: set[str]) -> None:
        self.restore = restore  # (sinks, function, bucket) around the scope
        self.merge_into = merge_into  # the name sets around the scope, which get its names when it ends
        self.names = names


def summarize(tree: ast.Module) -> Summary:
    """One pass over the tree; each name is added to every function that encloses it.

    A name goes into the innermost name set only (``bucket``: a function's, the top level of a
    class's, the module's), and a function's set is merged into the sets around it (``sinks``) when
    the walk leaves the function: the same sets as adding each name to all of them at once. Code at
    the top level goes to ``module_names``, a top-level class body to ``class_level``, and a def or
    class directly in the module body starts with no set around it."""
    functions: list[FunctionSummary] = []
    classes: set[str] = set()
    bases: set[str] = set()
    imports: set[str] = set()
    module_names: set[str] = set()
    class_level: set[str] = set()  # names in class bodies outside methods
    calls: list[tuple[ast.Call, FunctionSummary | None]] = []
    scopes = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    top = {id(stmt) for stmt in tree.body if type(stmt) in scopes}  # defs and classes with no set around them
    stack: list = list(reversed(tree.body))
    pop, push, extend = stack.pop, stack.append, stack.extend
    sinks: tuple[set[str], ...] = (module_names,)
    bucket = module_names
    function: FunctionSummary | None = None
    fields_of = _FIELDS
    while stack:
        node = pop()
        kind = type(node)
        if kind is ast.Name:
            bucket.add(node.id)
            continue
        if kind is ast.Attribute:
            bucket.add(node.attr)
            push(node.value)
            continue
        if kind is ast.Constant:
            value = node.value
            if type(value) is str and len(value) <= 12:
                bucket.add(value)
            continue
        if kind is ast.Call:
            calls.append((node, function))
            extend(node.keywords[::-1])
            extend(node.args[::-1])
            push(node.func)
            continue
        if kind is ast.keyword:
            push(node.value)
            continue
        if kind is ast.Subscript:
            push(node.slice)
            push(node.value)
            continue
        if kind is _Leave:
            for sink in node.merge_into:
                sink |= node.names
            sinks, function, bucket = node.restore
            continue
        elif kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
            f = FunctionSummary(node.name, set(), {_last(d) for d in node.decorator_list})
            functions.append(f)
            around = () if id(node) in top else sinks
            push(_Leave((sinks, function, bucket), around, f.names))
            sinks, function, bucket = (*around, f.names), f, f.names
        elif kind is ast.ClassDef:
            classes.add(node.name)
            bases.update(_last(b) for b in node.bases)
            push(_Leave((sinks, function, bucket), (), class_level))
            if id(node) in top:
                sinks, bucket = (class_level,), class_level
            function = None
        elif kind is ast.Import:
            imports.update(a.name for a in node.names)
        elif kind is ast.ImportFrom:
            mod = "." * node.level + (node.module or "")
            imports.add(mod)
            imports.update(f"{mod}.{a.name}" for a in node.names)
        marker = MARKERS.get(kind)
        if marker is not None:
            bucket.add(marker)
        fields = fields_of.get(kind)
        if fields is None:
            fields = stack_fields(kind)
        for field_name in fields:
            value = getattr(node, field_name, None)
            if type(value) is list:
                extend([v for v in reversed(value) if v is not None and type(v) is not str])
            elif value is not None:
                push(value)
    all_names = module_names | class_level
    for f in functions:
        all_names |= f.names
    return Summary(functions, module_names, all_names, classes, bases, imports, tree=tree, calls=calls)
