"""What a ``try`` loads and what its failure leaves behind: the import-path half of KC303
(:mod:`kcheck.rules.fallback.broad_except_fallback`).

A ``try`` that imports a kernel module, calls into a kernel library or builds an extension is a
kernel load (:func:`loads_kernel`); whether its broad handler hides a slower path depends on what
the module does with the names afterwards (:func:`nothing_to_fall_back_to`), on whether the
function is a probe whose callers announce its answer (:func:`announced_by_callers`,
:func:`answers_no`), and on whether the handler keeps or returns the reason (:func:`keeps_error`,
:func:`returns_reason`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import libcst as cst

from kcheck.claims import _walk
from kcheck.gate import qualify_from
from kcheck.project import kernel_loader
from kcheck.rules.fallback import (
    DYNAMIC_IMPORTS, KERNEL_LIBRARY, QUERY_NAME, dynamic_import, kernel_module, plain_import, sibling_statements,
    statements, warns,
)


# A library's own test, benchmark and profiling helpers (``flashinfer.testing.bench_gpu_time``):
# calling one times or checks kernels, it does not set one up.
TOOLING = re.compile(r"(^|\.)(testing|tests?|benchmarks?|profil\w*|bench_\w+)(\.|$)")


def _outside_guarded(stmt) -> Iterator[cst.CSTNode]:
    """The nodes of ``stmt``, less the bodies of nested ``try`` blocks with a broad handler: such a
    ``try`` is judged on its own handler (torchao's per-library ``load_library`` that warns inside
    an outer debug-only ``try``), and what it guards cannot reach the outer one."""
    stack = [stmt]
    while stack:
        node = stack.pop()
        yield node
        if type(node) is cst.Try and node is not stmt and any(_catches_all(h) for h in node.handlers):
            stack.extend(h for h in node.handlers)
            stack.extend(x for x in (node.orelse, node.finalbody) if x is not None)
            continue
        stack.extend(reversed(node.children))


def _catches_all(handler: cst.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types = [e.value for e in handler.type.elements] if type(handler.type) is cst.Tuple else [handler.type]
    return any(type(t) in (cst.Name, cst.Attribute) and (t.value if type(t) is cst.Name else t.attr.value)
               in ("Exception", "BaseException") for t in types)


def loads_kernel(model, body) -> str | None:
    """"the import of `m`" or "`load_inline()`" for the first kernel import or build in ``body``."""
    for stmt in body:
        for node in _outside_guarded(stmt):
            if type(node) is cst.Import:
                for alias in node.names:
                    name = model.dotted(alias.name) or ""
                    if plain_import(model, name):
                        continue  # a module of the project that has nothing to do with kernels (the index)
                    if kernel_module(name) or _bound(alias) in model.config.kernel_imports \
                            and model.enclosing_function(node) is None:
                        return f"the import of `{name}`"
            elif type(node) is cst.ImportFrom:
                mod = "." * len(node.relative) + (model.dotted(node.module) or "" if node.module is not None else "")
                names = [] if type(node.names) is cst.ImportStar else [model.dotted(a.name) or "" for a in node.names]
                if _own_plumbing(model, mod) or type(node.names) is not cst.ImportStar and node.names and all(
                        plain_import(model, qualify_from(mod, n)) for n in names):
                    continue  # the project's own module, which the index says has nothing to do with kernels
                if kernel_module(mod):
                    return f"the import of `{mod}`"
                loaded = [] if type(node.names) is cst.ImportStar or model.enclosing_function(node) is not None else [
                    n for n, a in zip(names, node.names) if _bound(a) in model.config.kernel_imports]
                if loaded:  # the project module it imports from loads a kernel when imported
                    return f"the import of `{mod}{'.' if node.module is not None else ''}{loaded[0]}` (its module loads a kernel when imported)"
                sub = next((n for n in names if kernel_module(f"{mod}.{n}" if node.module is not None else n)), None)
                if sub is not None:  # ``from vllm import _custom_ops as ops``
                    return f"the import of `{mod + '.' if node.module is not None else mod}{sub}`"
            elif type(node) is cst.Call:
                name = model.call_name(node) or ""
                if kernel_loader(name):
                    return f"`{model.dotted(node.func)}()`"
                dynamic = dynamic_import(node.args[0].value if node.args else None) \
                    if name.split(".")[-1] in DYNAMIC_IMPORTS else None
                if dynamic:
                    return f"the import of `{dynamic}`"
                if "." in name and KERNEL_LIBRARY.match(name) and not _own_package(model, name) \
                        and not QUERY_NAME.match(name.rsplit(".", 1)[-1]) and not TOOLING.search(name):
                    return f"`{name}()`"
                if type(node.func) is cst.Name and node.func.value in _builders(model):
                    return f"`{node.func.value}()`, which builds a kernel,"
    return None


def _bound(alias: cst.ImportAlias) -> str:
    """The local name an import alias binds (``import awq_ext`` binds awq_ext, ``import a.b``
    binds ``a``, ``from m import f as g`` binds ``g``)."""
    if alias.asname is not None and type(alias.asname.name) is cst.Name:
        return alias.asname.name.value
    node = alias.name
    while type(node) is cst.Attribute:
        node = node.value
    return node.value if type(node) is cst.Name else ""


def _own_plumbing(model, mod: str) -> bool:
    """Whether ``mod`` is a kernel library's own non-kernel module imported from inside that library
    (``from flashinfer.utils import get_compute_capability`` in flashinfer): only the library's name
    made it a kernel module, and the library's own plumbing is not a kernel it loads."""
    head, _, rest = mod.partition(".")
    return bool(rest) and bool(KERNEL_LIBRARY.match(head)) and _own_package(model, mod) and not kernel_module(rest)


def _own_package(model, name: str) -> bool:
    """Whether ``name`` lies in the package the file belongs to (flashinfer's own ``flashinfer.utils``
    is its plumbing, not a kernel library it calls into)."""
    return name.split(".")[0] in model.path.replace("\\", "/").split("/")[:-1]


def _builders(model) -> set[str]:
    """This module's top-level functions whose own body calls a kernel loader (``load_jit(...)``)."""
    found = model.__dict__.get("_kernel_builders")
    if found is None:
        found = model.__dict__["_kernel_builders"] = {
            name for name, defs in model.functions.items() for fn in defs
            if model.parent(fn) is model.module and any(
                type(n) is cst.Call and kernel_loader(model.call_name(n) or "") for n in _walk(fn.body))}
    return found


def answered_by_importers(model, names: set[str]) -> bool:
    """Whether other modules of the project import and read these top-level ``names``, every test of
    them raising or telling the user when a name says "missing" (``if not HAVE_DEEPEP: raise
    ImportError(...)``) and every other read calling or dereferencing it (``Buffer(group)``, loud on
    ``None``): the index's ``read_elsewhere``."""
    read = dict(model.config.read_elsewhere)
    verdicts = {read[name] for name in names if name in read}
    return "said" in verdicts and "silent" not in verdicts


def announced_by_callers(model, probe: cst.FunctionDef) -> bool:
    """Whether the probe's answer is announced where it is used: a caller in this module tests it
    (``if not is_fused_available(): logger.warning(...)``) and a branch of that test warns, or the
    modules that import a top-level probe all do (:func:`answered_by_importers`)."""
    if model.parent(probe) is model.module and answered_by_importers(model, {probe.name.value}):
        return True
    for call in model.callers(probe):
        for anc in model.ancestors(call):
            if type(anc) is cst.If:
                branches = [anc.body] + ([anc.orelse] if anc.orelse is not None else [])
                if warns(model, branches):
                    return True
                break
            if type(anc) in (cst.FunctionDef, cst.IndentedBlock):
                break
    return False


def answers_no(handler: cst.ExceptHandler) -> bool:
    """The handler only answers ``return False`` (or None): the function is a capability probe,
    whatever its name (``aiter_has_dense_mxscale()``)."""
    body = statements(handler.body)
    return len(body) == 1 and type(body[0]) is cst.SimpleStatementLine and type(body[0].body[0]) is cst.Return \
        and type(body[0].body[0].value) is cst.Name and body[0].body[0].value.value in ("False", "None")


def returns_reason(handler: cst.ExceptHandler) -> bool:
    """``return False, "requires aiter"``: a capability check that hands its caller (a kernel
    selector, which reports it) the reason it said no."""
    strings = (cst.SimpleString, cst.FormattedString, cst.ConcatenatedString)
    return any(type(n) is cst.Return and type(n.value) is cst.Tuple
               and any(type(e.value) in strings for e in n.value.elements)
               for s in statements(handler.body) for n in _walk(s))


def nothing_to_fall_back_to(model, node: cst.Try, handler: cst.ExceptHandler) -> bool:
    """Whether a failed import leaves no slower path behind, so there is nothing silent to report:
    what it imports keeps a stub bound before the ``try`` that raises when called
    (``gptq_repack = _unavailable`` then ``try: from .ops import gptq_repack``), or every use of the
    flag the handler sets refuses (``assert HAVE_TE``, ``if not HAVE_TE: raise ...``) while what it
    imports is used only as a type (``isinstance(m, TEModule)``) or where a failed import fails
    loudly (:func:`_loud_use`)."""
    imported = _imported_names(model, node)
    binds = _handler_binds(handler)
    flags, nones = {name for name, _ in binds}, {name for name, value in binds if value == "None"}
    module_level = model.parent(node) is model.module
    if imported and module_level and all(_stub_before(model, node, name) for name in imported):
        return True
    scope = model.enclosing_function(node)
    uses = [n for name in imported | flags for n in model.names_of(name)
            if not model.inside(n, node) and _same_binding(model, n, scope)]
    if not uses:  # read only by the modules that import it: they refuse or announce, or it is silent
        return module_level and answered_by_importers(model, imported | flags)
    # in a function whose handler returns, the later uses run only when the import worked: the
    # handler's answer is the fallback, and those uses say nothing of it
    answers = scope is not None and any(type(small) in (cst.Return, cst.Raise) for s in statements(handler.body)
                                        if type(s) is cst.SimpleStatementLine for small in s.body)
    # nor can a use fail loudly when the handler imports a replacement, or binds the name to anything but None
    can_fail = not answers and not _imports_replacement(handler)

    def loud(n: cst.Name) -> bool:
        return can_fail and _loud_use(model, n, imported | flags)

    def harmless(n: cst.Name) -> bool:
        if n.value not in flags:
            return _as_type(model, n) or loud(n)
        return _refuses(model, n) or _beside_type_test(model, n, imported) or (
            n.value in imported and n.value in nones and _dereferenced(model, n) and loud(n))

    if all(harmless(n) for n in uses):
        return True
    if answers:
        return False
    return _used_unguarded(model, handler, imported, flags, uses)


def _same_binding(model, n: cst.Name, scope) -> bool:
    """Whether a use of a name refers to what the ``try`` bound: inside the same function for a
    ``try`` in a function; for one at module level, not in a function that binds the name itself
    (``from aiter import f`` again inside a method is another binding)."""
    if scope is not None:
        return model.inside(n, scope)
    fn = model.enclosing_function(n)
    return fn is None or n.value not in _local_bindings(model, fn)


def _local_bindings(model, fn: cst.FunctionDef) -> set[str]:
    cache = model.__dict__.setdefault("_fallback_local_bindings", {})
    found = cache.get(id(fn))
    if found is None:
        found = cache[id(fn)] = set()
        for n in _walk(fn.body):
            if type(n) in (cst.Import, cst.ImportFrom) and type(n.names) is not cst.ImportStar:
                found.update((model.dotted(a.asname.name if a.asname else a.name) or "").split(".")[0] for a in n.names)
            elif type(n) is cst.AssignTarget and type(n.target) is cst.Name:
                found.add(n.target.value)
    return found


def _used_unguarded(model, handler: cst.ExceptHandler, imported: set[str], flags: set[str], uses: list) -> bool:
    """Whether the module uses what it imports as if the import had worked: no flag the handler sets
    is read, the handler binds no replacement, and no use is tested for or guarded (``import awq_ext``
    then ``self.linear = awq_ext.gemm_forward_cuda``). A failed import then fails loudly at the first
    use (a NameError), with no slower path to fall into silently."""
    if any(n.value not in imported for n in uses):
        return False  # a flag is read: the code chooses on it
    if _imports_replacement(handler):
        return False
    for s in statements(handler.body):
        for n in _walk(s):
            if type(n) is cst.Assign and type(n.value) is not cst.Name and any(
                    type(t.target) is cst.Name and t.target.value in imported for t in n.targets):
                return False  # a replacement bound to the imported name (``gemm = slow_gemm``)
    return all(_unguarded(model, n, imported | flags) for n in uses)


def _handler_binds(handler: cst.ExceptHandler) -> list[tuple[str, str]]:
    """(name, value) for each name the handler's own statements assign (``HAVE_TE = False``,
    ``fused = None``): the value's name when it is one (``"None"``), else ""."""
    return [(t.value, small.value.value if type(small.value) is cst.Name else "")
            for s in statements(handler.body) if type(s) is cst.SimpleStatementLine for small in s.body
            if type(small) is cst.Assign for t in (x.target for x in small.targets) if type(t) is cst.Name]


def _imports_replacement(handler: cst.ExceptHandler) -> bool:
    """The handler imports something in its place (another package's copy, a reference)."""
    return any(type(n) in (cst.Import, cst.ImportFrom) for s in statements(handler.body) for n in _walk(s))


def _unguarded(model, n: cst.Name, names: set[str]) -> bool:
    """A use that nothing steers around: no ``if``, conditional expression or ``while`` testing one of
    ``names`` above it (a choice on the import, judged by the rest of the rule), no ``try`` or boolean
    operator, up to its top-level definition."""
    for anc in model.ancestors(n):
        if type(anc) in (cst.If, cst.IfExp, cst.While) and any(
                type(m) is cst.Name and m.value in names for m in _walk(anc.test)):
            return False
        if type(anc) in (cst.Try, cst.BooleanOperation):
            return False
        if type(anc) in (cst.FunctionDef, cst.ClassDef) and model.parent(anc) is model.module:
            return True
    return True


def _imported_names(model, node: cst.Try) -> set[str]:
    """The names the ``try``'s own imports bind (:func:`_bound`)."""
    return {name for s in statements(node.body) for small in (s.body if type(s) is cst.SimpleStatementLine else ())
            if type(small) is cst.Import or type(small) is cst.ImportFrom and type(small.names) is not cst.ImportStar
            for a in small.names if (name := _bound(a))}


def _stub_before(model, node: cst.Try, name: str) -> bool:
    """``name`` is bound at module level above the ``try`` to a function whose body only raises."""
    body = list(model.module.body)
    for stmt in reversed(body[:body.index(node)] if node in body else []):
        for small in (stmt.body if type(stmt) is cst.SimpleStatementLine else ()):
            if type(small) is cst.Assign and any(type(t.target) is cst.Name and t.target.value == name
                                                for t in small.targets):
                value = small.value
                stubs = model.functions.get(value.value, []) if type(value) is cst.Name else []
                return bool(stubs) and all(_only_raises(fn) for fn in stubs)
    return False


def _only_raises(fn: cst.FunctionDef) -> bool:
    body = [s for s in statements(fn.body) if not (type(s) is cst.SimpleStatementLine and all(
        type(x) is cst.Expr and type(x.value) in (cst.SimpleString, cst.ConcatenatedString) for x in s.body))]
    return len(body) == 1 and type(body[0]) is cst.SimpleStatementLine and type(body[0].body[0]) is cst.Raise


def _as_type(model, n: cst.Name) -> bool:
    """``n`` is a class tested against (``isinstance(m, n)``, ``issubclass(c, (n, M))``) or an annotation."""
    for anc in model.ancestors(n):
        if type(anc) is cst.Annotation:
            return True
        if type(anc) is cst.Call:
            return type(anc.func) is cst.Name and anc.func.value in ("isinstance", "issubclass") \
                and len(anc.args) == 2 and model.inside(n, anc.args[1])
    return False


def _loud_use(model, n: cst.Name, names: set[str]) -> bool:
    """A use of an imported name that raises when the import failed: in an ``assert`` (whatever its
    test does with the name, the statement raises or goes on), or :func:`_unguarded` (``assert
    HAVE_TE`` then ``awq_ext.layernorm_forward_cuda(...)``: a NameError, not a slower path)."""
    for anc in _up_to_statement(model, n):
        if type(anc) is cst.Assert:
            return True
        if type(anc) is cst.IfExp and any(type(m) is cst.Name and m.value in names for m in _walk(anc.test)):
            return False
    return _unguarded(model, n, names)


def _dereferenced(model, n: cst.Name) -> bool:
    """``n`` is called or has an attribute read (``f(x)``, ``ext.op``): None there raises."""
    up = model.parent(n)
    return type(up) is cst.Call and up.func is n or type(up) is cst.Attribute and up.value is n


def _up_to_statement(model, node) -> Iterator[cst.CSTNode]:
    for anc in model.ancestors(node):
        if type(anc) is cst.SimpleStatementLine:
            return
        yield anc


def _beside_type_test(model, n: cst.Name, imported: set[str]) -> bool:
    """The flag is read only beside a type test of what the ``try`` imported
    (``return HAVE_FP8 and isinstance(t, Float8Tensor)``): without the class no such object exists,
    so the flag picks no slower path."""
    for anc in model.ancestors(n):
        if type(anc) is cst.BooleanOperation and type(anc.operator) is cst.And:
            return any(type(m) is cst.Name and m.value in imported and _as_type(model, m) for m in _walk(anc))
        if type(anc) in (cst.SimpleStatementLine, cst.If, cst.FunctionDef, cst.ClassDef):
            return False
    return False


def _refuses(model, n: cst.Name) -> bool:
    """``n`` is read by an ``assert`` or by the test of an ``if`` whose body raises."""
    for anc in model.ancestors(n):
        if type(anc) is cst.Assert:
            return True
        if type(anc) is cst.If:
            first = statements(anc.body)[:1]
            return model.inside(n, anc.test) and bool(first) and type(first[0]) is cst.SimpleStatementLine \
                and type(first[0].body[0]) is cst.Raise
        if type(anc) in (cst.SimpleStatementLine, cst.FunctionDef, cst.ClassDef):
            return False  # read by a plain statement, or the name bound by a definition
    return False


def keeps_error(model, handler: cst.ExceptHandler) -> bool:
    """Whether the handler keeps the error it caught (``except Exception as exc: self.reason = exc``):
    a probe that records why it chose the fallback, for whoever reports the choice."""
    if handler.name is None or type(handler.name.name) is not cst.Name:
        return False
    names = {handler.name.name.value}
    logged = set()  # the error's uses inside a log call say it, they do not keep it
    body = statements(handler.body)
    for s in body:
        for n in _walk(s):
            if type(n) is cst.Call and type(n.func) is cst.Attribute and "log" in (model.dotted(n.func.value) or "").lower():
                logged.update(id(m) for m in _walk(n))
    # a local made from the error (``message = str(exc)``, a truncated copy of it) is the error too;
    # kept only where it leaves the handler other than through a log call
    for _ in range(3):
        for s in body:
            for n in _walk(s):
                if type(n) is cst.Assign and all(type(t.target) is cst.Name for t in n.targets) and any(
                        type(m) is cst.Name and m.value in names for m in _walk(n.value)):
                    names |= {t.target.value for t in n.targets}

    def carries(node) -> bool:
        return any(type(m) is cst.Name and m.value in names and id(m) not in logged for m in _walk(node))

    fn = model.enclosing_function(handler)
    inside = {id(m) for st in body for m in _walk(st)}
    made = names - {handler.name.name.value}
    if made and fn is not None and any(type(m) is cst.Name and m.value in made and id(m) not in inside
                                       for m in _walk(fn.body)):
        return True  # a message made here and read after the handler (``return None, reason``)

    for s in body:
        for n in _walk(s):
            if type(n) in (cst.Return, cst.Raise) and carries(n):
                return True  # handed to the caller
            if type(n) in (cst.Assign, cst.AugAssign, cst.AnnAssign) and n.value is not None and carries(n.value) \
                    and not (type(n) is cst.Assign and all(type(t.target) is cst.Name for t in n.targets)):
                return True  # ``self.reason = exc``, ``errors[name] = exc``
            if type(n) is cst.Call and id(n) not in logged and not (
                    type(n.func) is cst.Name and n.func.value in ("str", "repr", "len", "type", "isinstance", "format")) \
                    and any(carries(a.value) for a in n.args):
                return True  # ``self.failures.append(exc)``, ``record(name, exc)``
    return False


def version_shim(model, node: cst.Try, handler: cst.ExceptHandler) -> bool:
    """Whether the handler imports from the same package the ``try`` does (``from te.pytorch.tensor
    import QuantizedTensor`` failing, then ``from te.pytorch.float8_tensor import Float8Tensor``):
    the same library under another version's module path, not a slower path. The handler's import
    must be a kernel module too (``from myproj.reference import gelu`` after ``myproj.kernels`` is
    the slower path). A nested ``try`` there is judged on its own handler."""
    def heads(nodes) -> set[str]:
        out = set()
        for root in nodes:
            for n in _walk(root):
                if type(n) is cst.ImportFrom and not n.relative and n.module is not None:
                    mods = [model.dotted(n.module) or ""]
                elif type(n) is cst.Import:
                    mods = [model.dotted(a.name) or "" for a in n.names]
                else:
                    continue
                out.update(m.split(".")[0] for m in mods if kernel_module(m))
        return out - {""}
    return bool(heads(statements(node.body)) & heads(statements(handler.body)))


def warns_deep(model, nodes, depth: int = 2) -> bool:
    """Whether ``nodes``, or the same-module helpers they call (``depth`` deep), warn visibly."""
    seen: set[int] = set()
    stack = [(root, 0) for root in nodes]
    while stack:
        root, level = stack.pop()
        if warns(model, [root]):
            return True
        for n in _walk(root):
            target = model.callee(n) if type(n) is cst.Call else None
            if target is not None and level < depth and id(target) not in seen:
                seen.add(id(target))
                stack.extend((s, level + 1) for s in statements(target.body))
    return False


def bound_names(model, node: cst.Try, handler: cst.ExceptHandler) -> set[str]:
    """What the ``try`` imports, and the plain names its body and handler assign (``HAVE_X``,
    ``flashinfer_comm = _comm``)."""
    names = _imported_names(model, node)
    for s in statements(node.body) + statements(handler.body):
        for small in (s.body if type(s) is cst.SimpleStatementLine else ()):
            if type(small) is cst.Assign:
                names.update(t.target.value for t in small.targets if type(t.target) is cst.Name)
    return names


def choices_on(model, node: cst.Try, handler: cst.ExceptHandler) -> list[tuple[cst.CSTNode, bool]]:
    """Each ``if`` or conditional expression outside the ``try`` that tests what it bound
    (``if flashinfer_comm is None:``, ``self._fused if HAVE_EXT else self._torch``), with whether
    the choice says so when taken: a branch that warns (for an early return, the statements after
    it), directly or through a same-module helper (``_warn_torch_only_fallback()``)."""
    found = []
    for name in bound_names(model, node, handler):
        for use in model.names_of(name):
            if model.inside(use, node):
                continue
            for anc in model.ancestors(use):
                if type(anc) is cst.If and model.inside(use, anc.test):
                    branches = statements(anc.body) + (
                        statements(anc.orelse.body) if type(anc.orelse) is cst.Else else [])
                    siblings = sibling_statements(model, anc)
                    if anc.orelse is None and anc in siblings and branches and ends(branches[-1]):
                        branches += siblings[siblings.index(anc) + 1:][:3]  # the early return's other side
                    found.append((anc, warns_deep(model, branches)))
                    break
                if type(anc) is cst.IfExp and model.inside(use, anc.test):
                    found.append((anc, warns_deep(model, [anc.body, anc.orelse])))
                    break
                if type(anc) in (cst.SimpleStatementLine, cst.FunctionDef, cst.ClassDef):
                    break
    return found


def announced_where_read(model, node: cst.Try, handler: cst.ExceptHandler) -> bool:
    """Whether the module announces the fallback where it reads what the ``try`` bound: it chooses
    on it (:func:`choices_on`), and every such choice says so. The import stays quiet, but the path
    it leaves says so when it is taken."""
    found = choices_on(model, node, handler)
    return bool(found) and all(said for _, said in found)


def ends(stmt) -> bool:
    return type(stmt) is cst.SimpleStatementLine and type(stmt.body[-1]) in (cst.Return, cst.Raise)
