"""KC3xx: missing, incomplete, broad and silent fallbacks around specialised kernels.

The rules of this family share three questions, answered here over the module model's launch
sites (:mod:`kcheck.claims`): which functions dispatch to a specialised kernel (directly or
through a same-module helper), what an ``if``/``assert`` test checks about the input (dtype,
device, shape, head size, layout), and whether a branch announces itself.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from dataclasses import dataclass
from typing import Iterator

import libcst as cst

from kcheck.claims import _walk, in_kernel_module, is_reference_name
from kcheck.facts import fact
from kcheck.project import (  # noqa: F401 - the family's rules read the kernel vocabulary from here
    KERNEL_LIBRARY, KERNEL_LOADERS, OTHER_DEVICES, QUERY_NAME, kernel_module,
)
from kcheck.gate import nodes_of, reachable
from kcheck.model import walk
from kcheck.project import OTHER_PLATFORM, TEST_PATH, VISIBLE_METHODS, absolute_import, custom_op
from kcheck.values import DTYPE_NAMES
from kcheck.rules.dispatch import _FUNCTION_DEFS, TRITON_LAST, _builds_extension, _decorator_names, _skip, ast_facts, dotted

# Text every file with a launch or dispatch site contains (a Triton launch ends in ``](``).
# and every name :func:`kernel_module` takes for a kernel module, whose functions are entry points.
DISPATCH_TEXT = (r"\]\s*\(|torch\.ops\.|_custom_ops|sgl_kernel|cpp_extension|\b_C\b|kernel|ops\b|ext|fused_|triton"
                 r"|_cuda|_cu\b|csrc|aiter|flash|deep_|xformers|apex|transformer_engine|fbgemm|mamba|conv1d|cudnn"
                 r"|quack|fla\b|bitsandbytes|gemlite")
DTYPES = DTYPE_NAMES
DEVICE_ATTRS = {"is_cuda", "is_xpu", "is_cpu", "is_mps", "device"}
HEAD_NAME = re.compile(r"head_?(size|dim)", re.I)
GROUP_NAME = re.compile(r"(^|_)group_?size$", re.I)  # a quantized weight's group size: a tile the kernel is built for
SUPPORT_NAME = re.compile(r"support|can_(use|run)|eligible|compatible|capab|fallback|reason", re.I)
CONSTANT_NAME = re.compile(r"^_?[A-Z][A-Z0-9_]*$|[Ss]upport")
ANNOUNCE_METHODS = {"warning_once", "warn_once", "info_once", "debug_once", "print_warning_once", "warning", "warn",
                    "info", "debug", "error", "log"}
SUPPORT_KINDS = {"dtype", "device", "shape", "head", "group"}  # what KC301 treats as "unsupported input"
OUTPUT_NAME = re.compile(r"^(out|output|result|res)$|_out$|^out_")
INDEX_DTYPES = {"int8", "uint8", "int16", "int32", "int64", "int", "long", "short", "bool", "uint32", "uint64"}
ALLOCATORS = {"empty", "empty_like", "zeros", "zeros_like", "new_empty", "new_zeros", "full", "full_like",
              "ones", "ones_like", "empty_strided"}
OTHER_KERNEL = re.compile(r"triton|kernel|cuda|\._c\.|^_c\.|aiter|flashinfer|sgl_|deep_?gemm|cutlass|marlin")
BROAD_EXCEPTIONS = {"Exception", "BaseException"}
KIND_TEXT = {"dtype": "the dtype", "device": "the device", "shape": "a shape", "head": "the head size",
             "group": "the quantization group size",
             "layout": "the memory layout", "rank": "the rank", "available": "whether the kernel is installed",
             "feature": "an optional input"}


# -- the gates: dispatching functions over the ``ast`` ---------------------------------------------------


@dataclass
class GateDispatch:
    """What the KC3xx gates know of a file's dispatches (see :func:`gate_dispatch`)."""

    dispatchers: set[str]  # names of functions that may dispatch, directly or through helpers two calls deep
    sites: set[int]  # ids of the ast calls that may be a dispatch site: a launch, or a call of such a function


def _launch_like(facts, call: ast.Call, function, kernels: set[str], extensions: set[str],
                 registries: set[str], kernel_entries: tuple[str, ...] = ()) -> bool:
    """Whether :func:`kcheck.claims._find_launches` may record ``call`` as a launch site (a superset:
    Triton kernels are known by the last component of their decorator)."""
    func = call.func
    if isinstance(func, ast.Subscript):
        base = dotted(func.value) or ""
        return base in kernels or "kernel" in base.split(".")[-1].lower()
    if registries and isinstance(func, ast.Name) and function is not None and function.names & registries:
        return True  # kernel = _KERNELS[key]; kernel(...)
    if kernel_entries and isinstance(func, ast.Name) and func.id in kernel_entries:
        return True  # a function imported from the project that launches a kernel (_calls_kernel_entry)
    name = facts.qualname(func) or ""
    parts = name.split(".")
    if custom_op(name):
        return True
    if extensions and (parts[0] in extensions and len(parts) >= 2 and parts[0] not in facts.aliases
                       or parts[0] == "self" and len(parts) >= 2):
        return True  # ext.fn(...), self.ext.fn(...), self.fn(...) bound to an inline extension
    return (dotted(func) or "").split(".")[0] in facts.aliases and not name.startswith("torch.") and (
        in_kernel_module(name) or imported_kernel(name))


def _may_launch(summary) -> bool:
    """A cheap necessary condition of any launch site: a ``x[...](...)`` call, an ``ops``, ``_C``,
    ``*_custom_ops``, ``sgl_kernel`` or ``cpp_extension`` name or import, a Triton kernel."""
    names = summary.all_names
    if names & {"ops", "_C", "sgl_kernel", "cpp_extension"} or any(n.endswith("_custom_ops") for n in names):
        return True
    if any(f.decorators & TRITON_LAST for f in summary.functions) or any(
        isinstance(c.func, ast.Subscript) for c, _ in summary.calls
    ):
        return True
    return any(any(w in i for w in ("torch.ops", "_custom_ops", "sgl_kernel", "cpp_extension", "_C"))
               or i.rsplit(".", 1)[-1] in TRITON_LAST or kernel_module(i) for i in summary.imports)


def gate_dispatch(summary, kernel_entries: tuple[str, ...] = ()) -> GateDispatch:
    """The functions that may dispatch to a kernel, by name, as :func:`_all_dispatchers` finds them
    with libcst: those holding a launch site, and their callers two calls up (every function of a
    name counts; reference functions and ``forward_native`` left out). ``kernel_entries``: the
    index's names imported from the project that launch a kernel. Cached in ``summary.memo``."""
    found = summary.memo.get("fallback")
    if found is not None:
        return found
    if not _may_launch(summary) and not summary.all_names & set(kernel_entries):
        found = summary.memo["fallback"] = GateDispatch(set(), set())
        return found
    facts = ast_facts(summary)
    kernels = {name for name, fns in facts.defs.items()
               if any(TRITON_LAST & set(_decorator_names(facts, fn)) for fn in fns)}
    extensions, registries = set(), set()
    for stmt in summary.tree.body:  # module-level bindings, as _module_bindings and _registries read them
        value = getattr(stmt, "value", None)
        targets = stmt.targets if isinstance(stmt, ast.Assign) else (
            [stmt.target] if isinstance(stmt, ast.AnnAssign) else [])
        names = {t.id for t in targets if isinstance(t, ast.Name)}
        if isinstance(value, ast.Call) and isinstance(stmt, ast.Assign) and _builds_extension(facts, value):
            extensions |= names
        elif isinstance(value, ast.Dict) and value.values and all(
            isinstance(v, (ast.Name, ast.Attribute)) for v in value.values
        ):
            registries |= names
    local = summary.function_names()
    sites: set[int] = set()
    calls: list[tuple[ast.Call, str, str]] = []  # (call, caller, callee) for same-module calls
    direct: set[str] = set()
    for call, function in summary.calls:
        if _launch_like(facts, call, function, kernels, extensions, registries, kernel_entries):
            sites.add(id(call))
            if function is not None:
                direct.add(function.name)
            continue
        func = call.func
        callee = func.id if isinstance(func, ast.Name) and func.id not in facts.aliases else (
            func.attr if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
            and func.value.id in ("self", "cls") else None)
        if callee in local and function is not None:
            calls.append((call, function.name, callee))
    dispatching = set(direct)
    for _ in range(2):  # callers of dispatching helpers, two levels up
        dispatching |= {caller for _, caller, callee in calls if callee in dispatching}
    sites |= {id(call) for call, _, callee in calls if callee in dispatching}
    found = summary.memo["fallback"] = GateDispatch({n for n in dispatching if not _skip(n)}, sites)
    return found


def claimed_dispatchers(summary, config) -> set[str] | None:
    """The dispatching functions on the compute path of a claim of :data:`FALLBACK_CLAIMS` (the
    ``forward_cuda`` of a class based on ``CustomOp`` or beside a ``forward_native``, and the
    functions it names three calls deep, as :func:`claim_path`), by name; None on a configured
    kernel path, where every function is a claim."""
    if config.kernel_paths and config.is_kernel_path(summary.path):
        return None
    names = summary.function_names()
    patched = set() if NOT_SERVED.search(summary.path) else {
        stmt.value.id for stmt in nodes_of(summary, ast.Assign)
        if isinstance(stmt.value, ast.Name) and any(
            isinstance(t, ast.Attribute) and t.attr in PATCHED_METHODS for t in stmt.targets)}
    if "forward_cuda" not in names and not patched and (
            not names & (FUNCTION_ENTRIES | {CALLABLE_ENTRY}) or NOT_SERVED.search(summary.path)):
        return set()
    dispatching = gate_dispatch(summary, config.kernel_entries).dispatchers
    if not dispatching:
        return set()
    roots = set()
    for cls in ast_facts(summary).classes:
        methods = {s.name for s in cls.body if isinstance(s, _FUNCTION_DEFS)}
        bases = {(dotted(b) or "").split(".")[-1] for b in cls.bases}
        if "forward_cuda" in methods and ("CustomOp" in bases or "forward_native" in methods):
            roots.add("forward_cuda")
        if cls.name not in SOLUTION_CLASSES and not NOT_SERVED.search(summary.path):
            # entry points, a models/ folder's included (looser than entry_points without model_code)
            roots |= methods & ({CALLABLE_ENTRY} | (FUNCTION_ENTRIES if bases & ENTRY_BASES else set()))
    roots |= patched
    return dispatching & reachable(summary, roots, 3, _skip) if roots else set()


@fact("dispatcher")
def has_dispatcher(summary, config) -> bool:
    """A function of the file may launch a specialised kernel (:func:`gate_dispatch`)."""
    return bool(gate_dispatch(summary, config.kernel_entries).dispatchers)


@fact("dispatcher meets demands")
def dispatcher_meets_demands(summary, config) -> bool:
    """A function of the file may launch a specialised kernel and a call in the file meets a
    callee's demands (the index's ``Config.demands``)."""
    return bool(config.demands) and has_dispatcher(summary, config)


@fact("dispatcher refusing a sibling route")
def dispatcher_refusing_sibling_route(summary, config) -> bool:
    """A function of the file may launch a specialised kernel, and an ``if`` of the file raises or
    asserts on one side while the other side computes (calls, neither raises nor asserts): what
    KC301's sibling-route check (``_sibling_route``) reads."""
    if not has_dispatcher(summary, config) or summary.tree is None:
        return False
    for node in ast.walk(summary.tree):
        if type(node) is ast.If and node.orelse:
            for side, other in ((node.body, node.orelse), (node.orelse, node.body)):
                inner = [n for stmt in side for n in ast.walk(stmt)]
                rest = [n for stmt in other for n in ast.walk(stmt)]
                if any(type(n) in (ast.Raise, ast.Assert) for n in inner) and any(type(n) is ast.Call for n in rest) \
                        and not any(type(n) in (ast.Raise, ast.Assert) for n in rest):
                    return True
    return False


@fact("claimed dispatcher")
def has_claimed_dispatcher(summary, config) -> bool:
    """Such a function lies on a kernel claim's compute path (:func:`claimed_dispatchers`), or the
    file is a configured kernel path."""
    names = claimed_dispatchers(summary, config)
    return names is None or bool(names)


# A capability probe: a function that answers whether something is available. Its False is clean
# when a caller that tests it announces the choice (broad_except_fallback._announced_by_callers).
PROBE_NAME = re.compile(r"^_*(is|has|can|supports?|check)_\w+|_(available|supported|usable)$")


# Calls that import a module named by a string (``importlib.import_module(f"pkg.kernels.{device}")``).
DYNAMIC_IMPORTS = {"import_module", "__import__"}


def dynamic_import(arg) -> str | None:
    """The module a dynamic import names (a string, or an f-string whose fields are left out, as
    ``pkg.kernels.*``) when it is a kernel module, else None (libcst)."""
    if type(arg) is cst.SimpleString:
        text = str(arg.evaluated_value)
    elif type(arg) is cst.FormattedString:
        text = "".join(p.value if type(p) is cst.FormattedStringText else "*" for p in arg.parts)
    else:
        return None
    return text if kernel_module(text.replace("*", "").rstrip(".") or "_") else None


def imported_kernel(name: str) -> bool:
    """Whether a qualified call name is a function imported from a kernel module or library
    (``from .kernels.swiglu import run``; ``flash_attn.flash_attn_func``): an entry point of a
    kernel written in another module. Classes, queries (``get_*``, ``is_*``) and dunders are not."""
    module, _, last = name.rpartition(".")
    if not module.strip(".") or not last or last[0].isupper() or last.startswith("__") or QUERY_NAME.match(last):
        return False
    return kernel_module(module)


def plain_import(model, target: str) -> bool:
    """Whether ``target`` (a module or a name in one, as the import spells it, dots included) comes
    from a module of the project that has nothing to do with kernels: the index's
    ``Config.plain_imports``, whatever the package is called."""
    plain = model.config.plain_imports
    return bool(plain and target) and absolute_import(model.path, target) in plain


def _calls_kernel_entry(model, call: cst.Call, head: str) -> bool:
    """A call of a function the file imports that launches a kernel in its own body (the index's
    ``Config.kernel_entries``): ``flash_d512(q, k, v)`` after ``from .flash_attn_d512 import
    flash_d512``, whose body runs ``_kernel[grid](...)``."""
    return type(call.func) is cst.Name and head in model.config.kernel_entries


def kernel_builders_ast(tree: ast.Module) -> set[str]:
    """Module-level functions whose own body calls a kernel loader (``load_jit(...)``), and the
    names the file imports from a kernel library: what :func:`loads_kernel_ast` takes a call of
    for a kernel build (the libcst side resolves the same calls)."""
    found: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                isinstance(n, ast.Call) and (dotted(n.func) or "").split(".")[-1] in KERNEL_LOADERS
                for n in ast.walk(stmt)):
            found.add(stmt.name)
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and not n.level and KERNEL_LIBRARY.match(n.module or ""):
            found.update(a.asname or a.name for a in n.names)
        elif isinstance(n, ast.Import):
            found.update((a.asname or a.name).split(".")[0] for a in n.names if KERNEL_LIBRARY.match(a.name))
    return found


def loads_kernel_ast(node: ast.AST, builders: set[str] = frozenset(), loaded: tuple[str, ...] = ()) -> str | None:
    """What a statement of a ``try`` body imports or builds that is a kernel, or None (``ast``);
    ``builders``: :func:`kernel_builders_ast`, whose calls count too; ``loaded``: the names the file
    imports from project modules that load a kernel (``Config.kernel_imports``)."""
    for n in ast.walk(node):
        if isinstance(n, ast.Call) and builders and (dotted(n.func) or "").split(".")[0] in builders:
            return (dotted(n.func) or "") + "()"
        if isinstance(n, ast.Import):
            for alias in n.names:
                if kernel_module(alias.name) or (alias.asname or alias.name.split(".")[0]) in loaded:
                    return alias.name
        elif isinstance(n, ast.ImportFrom):
            mod = "." * n.level + (n.module or "")
            if kernel_module(mod) or any(kernel_module(f"{mod}.{a.name}" if n.module else a.name)
                                         or (a.asname or a.name) in loaded for a in n.names):
                return mod or n.names[0].name
        elif isinstance(n, ast.Call) and ((dotted(n.func) or "").split(".")[-1] in KERNEL_LOADERS):
            return (dotted(n.func) or "") + "()"  # looser than the rule: any receiver
        elif isinstance(n, ast.Call) and (dotted(n.func) or "").split(".")[-1] in DYNAMIC_IMPORTS and n.args:
            arg = n.args[0]
            text = arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else "".join(
                v.value for v in arg.values if isinstance(v, ast.Constant) and isinstance(v.value, str)
            ) if isinstance(arg, ast.JoinedStr) else ""
            if text and kernel_module(text.rstrip(".") or "_"):
                return text  # looser than the rule: the f-string's text with its fields left out
    return None


def module_level_trys(summary) -> set[int]:
    """The ``try`` statements that run when the module is imported (outside functions and classes)."""
    found = summary.memo.get("module_trys")
    if found is None:
        found, stack = set(), list(summary.tree.body)
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(node, ast.Try):
                found.add(id(node))
            stack.extend(n for n in ast.iter_child_nodes(node) if isinstance(n, ast.stmt))
        summary.memo["module_trys"] = found
    return found


# What a failed import raises: a handler of these alone expects the kernel to be missing.
IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError"}


def caught(model, handler: cst.ExceptHandler) -> set[str]:
    """The last names of the exceptions a handler catches (``*`` for a bare ``except:``), as
    :func:`_caught` reads them over the ``ast``."""
    if handler.type is None:
        return {"*"}
    types = [e.value for e in handler.type.elements] if type(handler.type) is cst.Tuple else [handler.type]
    return {(model.dotted(t) or "").split(".")[-1] for t in types}


def _caught(handler: ast.ExceptHandler) -> set[str]:
    """The exception names a handler catches (``*`` for a bare ``except:``)."""
    if handler.type is None:
        return {"*"}
    return {(dotted(t) or "").split(".")[-1] for t in (handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type])}


@fact("kernel import under try")
def kernel_import_under_try(summary, config) -> bool:
    """Whether a ``try`` anywhere in the file imports or builds a kernel with a broad handler."""
    return _kernel_try(summary, config, lambda caught: "*" in caught or bool(caught & BROAD_EXCEPTIONS))


@fact("kernel import under an import-error handler")
def kernel_import_expecting_absence(summary, config) -> bool:
    """Whether a ``try`` the module runs on import imports a kernel with an ``ImportError`` handler."""
    return _kernel_try(summary, config, lambda caught: bool(caught & IMPORT_ERRORS) and not caught & (BROAD_EXCEPTIONS | {"*"}),
                       module_level=True)


def _kernel_try(summary, config, catches, module_level: bool = False) -> bool:
    if summary.tree is None or TEST_PATH.search(summary.path):
        return False
    for node in nodes_of(summary, ast.Try):
        if module_level and id(node) not in module_level_trys(summary):
            continue
        if any(catches(_caught(h)) for h in node.handlers):
            builders = summary.memo.get("kernel_builders")
            if builders is None:
                builders = summary.memo["kernel_builders"] = kernel_builders_ast(summary.tree)
            loaded = config.kernel_imports if config.kernel_imports and id(node) in module_level_trys(summary) else ()
            if any(loads_kernel_ast(stmt, builders, loaded) for stmt in node.body):
                return True
    return False


def warns(model, nodes: list[cst.CSTNode]) -> bool:
    """Whether ``nodes`` announce themselves at a level a user sees (info and above, or print)."""
    for root in nodes:
        for node in _walk(root):
            if type(node) is not cst.Call:
                continue
            func = node.func
            if type(func) is cst.Name and func.value == "print":
                return True
            if (model.call_name(node) or "") == "warnings.warn":
                return True
            if type(func) is cst.Attribute and func.attr.value in VISIBLE_METHODS:
                return True
            if configured_announcer(model, model.call_name(node) or ""):
                return True
    return False


# -- where the dispatches are ----------------------------------------------------------------------


@dataclass
class Dispatcher:
    """A function that launches a kernel directly or through same-module helpers."""

    function: cst.FunctionDef
    sites: list[cst.Call]  # launches and calls of dispatching helpers written in its own body
    order: dict[int, int]  # id(node) -> pre-order index in the function (for "before")
    label: str  # what is dispatched to, for messages

    def dispatches(self, nodes) -> bool:
        ids = {id(s) for s in self.sites}
        return any(id(n) in ids for root in nodes for n in _walk(root))

    def before_last_site(self, node: cst.CSTNode) -> bool:
        last = max((self.order.get(id(s), -1) for s in self.sites), default=-1)
        return self.order.get(id(node), 1 << 30) < last


def dispatchers(model, claimed: bool = True, model_code: bool = False) -> list[Dispatcher]:
    """Every non-reference function that dispatches to a kernel (cached on the model); with
    ``claimed``, only those on a kernel claim's compute path (:func:`claim_path`, with
    ``model_code`` counting a ``models/`` folder's entry points)."""
    cached = getattr(model, "_fallback_dispatchers", None)
    if cached is None:
        cached = model._fallback_dispatchers = _all_dispatchers(model)
    if not claimed:
        return cached
    path = claim_path(model, model_code=model_code)
    return [d for d in cached if id(d.function) in path]


def _all_dispatchers(model) -> list[Dispatcher]:
    direct: dict[int, tuple[cst.FunctionDef, list[cst.Call], str]] = {}
    for launch in model.launch_sites.values():
        fn = model.enclosing_function(launch.call)
        if fn is None or fn in model.triton_kernels or fn in model.dsl_kernels:
            continue
        entry = direct.setdefault(id(fn), (fn, [], launch.name))
        entry[1].append(launch.call)
    for call in model.calls:  # calls of kernels imported from other modules
        name = model.call_name(call) or ""
        fn = model.enclosing_function(call)
        head = (model.dotted(call.func) or "").split(".")[0]
        if fn is None or fn in model.triton_kernels or fn in model.dsl_kernels or id(call) in model.launch_sites or \
                head not in model.imports or plain_import(model, model.imports[head]) or not (
                    imported_kernel(name) or _calls_kernel_entry(model, call, head)):
            continue
        if type(model.parent(call)) is cst.WithItem:
            continue  # ``with _device_guard(w):``: a context manager from the kernel module, not a launch
        entry = direct.setdefault(id(fn), (fn, [], name))
        entry[1].append(call)
    found = dict(direct)
    local_calls = [(c, t) for c in model.calls if (t := model.callee(c)) is not None]
    for _ in range(2):  # callers of dispatching helpers, two levels up
        added: dict[int, tuple] = {}
        for call, target in local_calls:
            if id(target) not in found:
                continue
            fn = model.enclosing_function(call)
            if fn is None or fn is target:
                continue
            entry = added.get(id(fn)) or found.get(id(fn)) or (fn, [], found[id(target)][2])
            if not any(s is call for s in entry[1]):
                entry[1].append(call)
            added[id(fn)] = entry
        if all(k in found for k in added):
            break
        found.update(added)
    out = []
    for fn, sites, label in found.values():
        if is_reference_name(fn.name.value) or fn.name.value == "forward_native":
            continue
        order = {id(n): i for i, n in enumerate(_walk(fn.body))}
        out.append(Dispatcher(fn, sites, order, label))
    return out


# Claims that put a kernel in place of a library path on a serving path: a CustomOp-style
# ``forward_cuda`` beside its ``forward_native``, or code under a configured kernel path. A
# registered custom op (often a low-level op registered only so torch.compile can trace it), a
# ``ModelNew`` or a leaderboard ``custom_kernel`` (run on the task's fixed inputs) owe no fallback.
FALLBACK_CLAIMS = {"custom-op-class", "kernel-path"}
# Entry points a model reaches: the ``forward`` of an ``nn.Module`` or of an autograd ``Function``
# that launches a specialised kernel (directly or through same-module helpers). Whatever inputs
# the models send arrive there, so a fallback is owed there too; not in tests and benchmarks, and not
# in a task's ``ModelNew``/``Model`` solution (run on the task's fixed inputs).
ENTRY_BASES = {"Module", "Function"}
SOLUTION_CLASSES = {"ModelNew", "Model"}
# Nor in one model's own code (a ``models/`` folder: the model fixes its dtypes and shapes, so a
# check there states the model's contract) or another platform's backend.
# Tests and benchmarks: they skip, record or leave out what they cannot import or run.
TEST_OR_BENCH = re.compile(
    r"(^|/)(tests?|testing|benchmarks?|bench[^/]*)/"
    r"|(^|/)(test_[^/]*|[^/]*_test|conftest|bench[^/]*)\.py$")
NOT_SERVED = re.compile(TEST_OR_BENCH.pattern + r"|(^|/)examples?/|" + OTHER_PLATFORM.pattern)
MODEL_CODE = re.compile(r"(^|/)models?/")
NO_FALLBACK_OWED = re.compile(NOT_SERVED.pattern + "|" + MODEL_CODE.pattern)
# Entry methods beside ``forward``: an autograd Function's ``backward`` (every training step reaches
# it), and ``__call__`` of any class (a callable layer or processor that a model calls in place of
# a module, such as an attention processor).
FUNCTION_ENTRIES = {"forward", "backward"}
CALLABLE_ENTRY = "__call__"


# A function patched in as a class's method (``Qwen3MLP.forward = _mlp_forward_fused``) replaces
# that class's forward for every model that uses it: an entry point as much as a written forward.
PATCHED_METHODS = {"forward"}


def entry_points(model, model_code: bool = False) -> list[cst.FunctionDef]:
    """The ``forward`` methods of ``nn.Module`` and autograd ``Function`` classes (and a
    ``Function``'s ``backward``) that dispatch to a specialised kernel (:data:`ENTRY_BASES`), the
    ``__call__`` of any class that does, and the module's functions patched in as a class's
    ``forward`` (:data:`PATCHED_METHODS`). With ``model_code``, a ``models/`` folder's too (for
    the checks a model does not settle: whether the kernel is installed, whether a caller passes an
    optional input)."""
    if NOT_SERVED.search(model.path) or (MODEL_CODE.search(model.path) and not model_code):
        return []
    dispatching = {id(d.function) for d in dispatchers(model, claimed=False)}
    found = []
    for cls in model.classes.values():
        if cls.name.value in SOLUTION_CLASSES or type(cls.body) is not cst.IndentedBlock:
            continue
        bases = {(model.dotted(b.value) or "").split(".")[-1] for b in cls.bases}
        names = ({CALLABLE_ENTRY} if not _kernel_class(model, cls) else set()) | (
            (FUNCTION_ENTRIES if "Function" in bases else {"forward"}) if bases & ENTRY_BASES else set())
        for stmt in cls.body.body:
            if type(stmt) is cst.FunctionDef and stmt.name.value in names and id(stmt) in dispatching:
                found.append(stmt)
    for node in walk(model.module):
        if type(node) is cst.Assign and type(node.value) is cst.Name and any(
                type(t.target) is cst.Attribute and t.target.attr.value in PATCHED_METHODS for t in node.targets):
            found += [fn for fn in model.functions.get(node.value.value, ())
                      if id(fn) in dispatching and model.parent(fn) is model.module]
    return found


JIT_DECORATORS = {"jit", "kernel", "compile"}


def _kernel_class(model, cls: cst.ClassDef) -> bool:
    """A class that is a kernel itself (a CuTe-DSL kernel object): one of its methods is decorated
    with a JIT decorator (``@cute.jit``, ``@cute.kernel``). Its ``__call__`` is compile-time kernel
    code, whose asserts state the kernel's own contract, not an entry point."""
    for stmt in cls.body.body:
        if type(stmt) is cst.FunctionDef and any(
                (model.dotted(d.decorator.func if type(d.decorator) is cst.Call else d.decorator) or "")
                .split(".")[-1] in JIT_DECORATORS for d in stmt.decorators):
            return True
    return False


def claims_only(model, function: cst.FunctionDef) -> bool:
    """Whether ``function`` is on a kernel claim's compute path (not only an entry point's): there a
    device test is a guard too (``forward_cuda`` is the GPU's path), where at a module's ``forward``
    it is dispatch by device."""
    return id(function) in claim_path(model, entries=False)


def claim_path(model, depth: int = 3, entries: bool = True, model_code: bool = False) -> set[int]:
    """ids of the functions on the compute path of a claim in :data:`FALLBACK_CLAIMS`: the
    claim's function and the same-module helpers it calls, to ``depth`` (reference functions and
    ``forward_native`` excluded).

    Only there does code present a new kernel in place of a library op that every input used to
    reach, so only there is a declared fallback owed. Elsewhere an assert or a device branch in a
    low-level op wrapper states an internal contract its callers keep (or a native op checks its
    own inputs), and failing loudly on a broken contract is right."""
    key = f"_fallback_claim_path_{entries}_{model_code}"
    cached = getattr(model, key, None)
    if cached is not None:
        return cached
    out: set[int] = set()
    stack = [(claim.function, 0) for claim in model.kernel_claims if claim.kind in FALLBACK_CLAIMS]
    if entries:
        stack += [(fn, 0) for fn in entry_points(model, model_code)]
    while stack:
        fn, level = stack.pop()
        if id(fn) in out:
            continue
        out.add(id(fn))
        if level >= depth:
            continue
        for node in _walk(fn.body):
            if type(node) is cst.Call:
                target = model.callee(node)
                if target is not None and id(target) not in out and not (
                    is_reference_name(target.name.value) or target.name.value == "forward_native"
                ):
                    stack.append((target, level + 1))
    setattr(model, key, out)
    return out


# -- what a test checks ------------------------------------------------------------------------------


def prop_kind(model, node: cst.CSTNode) -> str | None:
    """Which input property an expression reads: dtype, device, shape, head, layout, rank (or None)."""
    if type(node) is cst.BinaryOperation:
        return prop_kind(model, node.left)
    if type(node) is cst.UnaryOperation:
        return prop_kind(model, node.expression)
    if type(node) is cst.Subscript:
        return prop_kind(model, node.value)
    if type(node) is cst.Call:
        name = model.call_name(node) or ""
        if name in ("torch.cuda.is_available",):
            return "device"
        if type(node.func) is cst.Attribute:
            method = node.func.attr.value
            if method == "size" and node.args:
                return "shape"
            if method in ("is_contiguous", "stride"):
                return "layout"
            if method == "dim":
                return "rank"
        return None
    if type(node) is cst.Attribute:
        attr = node.attr.value
        if attr == "dtype":
            return "dtype"
        if attr in DEVICE_ATTRS or attr == "type" and type(node.value) is cst.Attribute and node.value.attr.value == "device":
            return "device"
        if attr == "shape":
            return "shape"
        if attr == "ndim":
            return "rank"
        if HEAD_NAME.search(attr) and not CONSTANT_NAME.search(attr):
            return "head"
        if GROUP_NAME.search(attr) and not CONSTANT_NAME.search(attr):
            return "group"
        return None
    if type(node) is cst.Name and HEAD_NAME.search(node.value) and not CONSTANT_NAME.search(node.value):
        return "head"
    if type(node) is cst.Name and GROUP_NAME.search(node.value) and not CONSTANT_NAME.search(node.value):
        return "group"
    return None


def is_constant(model, node: cst.CSTNode) -> bool:
    if type(node) in (cst.Integer, cst.Float, cst.SimpleString, cst.ConcatenatedString):
        return True
    if type(node) is cst.Name:
        return node.value == "None" or (bool(CONSTANT_NAME.search(node.value)) and node.value in model.module_names())
    if type(node) is cst.Attribute:
        name = model.qualname(node) or ""
        return (name.startswith("torch.") and name.split(".")[-1] in DTYPES) or bool(
            CONSTANT_NAME.search(node.attr.value))
    if type(node) in (cst.Tuple, cst.List, cst.Set):
        return bool(node.elements) and all(is_constant(model, e.value) for e in node.elements)
    if type(node) is cst.UnaryOperation:
        return is_constant(model, node.expression)
    return False


def support_checks(model, test: cst.CSTNode) -> set[str]:
    """Input properties ``test`` compares with a constant (a supported set, a size limit, an
    alignment, a device), as a KC301-style "is this input supported" check. A test that also
    compares one argument with another (``a.dtype == b.dtype``), or that checks an output buffer,
    is a contract check: calling it wrong is a bug, not unsupported input, and it does not count."""
    kinds: set[str] = set()
    for node in _walk(test):
        if type(node) is cst.Comparison:
            left = node.left
            for target in node.comparisons:
                right = target.comparator
                lk, rk = prop_kind(model, left), prop_kind(model, right)
                if (lk and (rk or mentioned_props(model, right))) or (rk and mentioned_props(model, left)) or (
                    _is_output(model, left) or _is_output(model, right)
                ):
                    return set()  # a contract check between arguments, or on an output buffer
                for prop, kind, other in ((left, lk, right), (right, rk, left)):
                    if kind == "dtype" and (_index_dtype(model, other) or _every_float(model, other)):
                        continue  # int64 indices, uint8 buffers, or every float dtype a model runs in:
                        # a contract, not a compute dtype the kernel lacks
                    if type(other) is cst.Integer and other.value == "0" and type(prop) is not cst.BinaryOperation:
                        continue  # "not empty" is an invariant, not a supported range
                    if kind in SUPPORT_KINDS and is_constant(model, other) and not (
                        type(prop) is cst.BinaryOperation and not is_constant(model, prop.right)
                    ):
                        kinds.add(kind)
                left = right
        elif type(node) in (cst.Attribute, cst.Call) and _boolean_device(model, node, test):
            kinds.add("device")  # `x.is_cuda`, `torch.cuda.is_available()` used as a boolean
    return kinds


# Whether the kernel is there: a flag the import sets (HAVE_APEX, AWQ_INSTALLED, TRITON_AVAILABLE), a
# probe (``_is_triton_available()``, ``has_fused_kernel()``), or the imported extension itself
# (``ext is None``, ``not ext``). torch.cuda.is_available() asks about the device, not the kernel.
AVAILABLE_FLAG = re.compile(r"^_?(HAVE|HAS)_[A-Z0-9_]+$|[A-Z0-9]_(AVAILABLE|INSTALLED|LOADED)$")
AVAILABLE_PROBE = re.compile(r"^_*(\w+_(available|installed|loaded)|has_\w+)$")


def availability_test(model, test: cst.CSTNode) -> bool:
    """Whether a clause of ``test`` (alone, negated, or joined by and/or) asks whether the kernel is
    installed: an availability flag, a probe call, or an imported kernel module compared with None."""
    if type(test) is cst.BooleanOperation:
        return availability_test(model, test.left) or availability_test(model, test.right)
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        return availability_test(model, test.expression)
    if type(test) is cst.Name:
        return bool(AVAILABLE_FLAG.search(test.value)) or _kernel_binding(model, test)
    if type(test) is cst.Attribute:
        return bool(AVAILABLE_FLAG.search(test.attr.value))
    if type(test) is cst.Call:
        name = model.call_name(test) or model.dotted(test.func) or ""
        return not name.startswith("torch.") and bool(AVAILABLE_PROBE.match(name.split(".")[-1]))
    if type(test) is cst.Comparison and len(test.comparisons) == 1 and type(test.comparisons[0].operator) in (
            cst.Is, cst.IsNot) and type(test.comparisons[0].comparator) is cst.Name \
            and test.comparisons[0].comparator.value == "None":
        return type(test.left) is cst.Name and _kernel_binding(model, test.left)
    return False


def _kernel_binding(model, name: cst.Name) -> bool:
    """A module-level name bound by importing a kernel module (``import awq_ext``, ``from pkg import
    _C as ext``)."""
    qualified = model.imports.get(name.value)
    return bool(qualified) and kernel_module(qualified) and name.value in model.module_names()


def _boolean_device(model, node: cst.CSTNode, test: cst.CSTNode) -> bool:
    """``x.is_cuda`` or ``torch.cuda.is_available()`` as a clause of the test itself (not an argument)."""
    if prop_kind(model, node) != "device" or (type(node) is cst.Attribute and node.attr.value == "device"):
        return False
    current = node
    while current is not test:
        parent = model.parent(current)
        if type(parent) not in (cst.BooleanOperation, cst.UnaryOperation):
            return False
        current = parent
    return True


MODEL_FLOATS = {"float32", "float16", "bfloat16"}


def _every_float(model, node: cst.CSTNode) -> bool:
    """A set of dtypes holding fp32, fp16 and bf16 (``x.dtype in (torch.float32, torch.float16,
    torch.bfloat16)``): whatever a model runs in is supported, so the check fails only on a bug."""
    if type(node) not in (cst.Tuple, cst.List, cst.Set):
        return False
    names = {(model.dotted(e.value) or "").split(".")[-1] for e in node.elements}
    return MODEL_FLOATS <= names | {{"float": "float32", "half": "float16"}.get(n, n) for n in names}


def _index_dtype(model, node: cst.CSTNode) -> bool:
    if type(node) in (cst.Tuple, cst.List, cst.Set):
        return bool(node.elements) and all(_index_dtype(model, e.value) for e in node.elements)
    name = model.qualname(node) if type(node) is cst.Attribute else None
    return bool(name) and name.startswith("torch.") and name.split(".")[-1] in INDEX_DTYPES


def _is_output(model, node: cst.CSTNode) -> bool:
    while type(node) in (cst.Attribute, cst.Subscript, cst.Call, cst.BinaryOperation):
        node = node.left if type(node) is cst.BinaryOperation else (
            node.func if type(node) is cst.Call else node.value)
    return type(node) is cst.Name and bool(OUTPUT_NAME.search(node.value))


def device_only(model, test: cst.CSTNode) -> bool:
    """Whether every clause of a boolean test is a device check (``x.is_cuda and not y.is_cpu``)."""
    if type(test) is cst.BooleanOperation:
        return device_only(model, test.left) and device_only(model, test.right)
    if type(test) is cst.UnaryOperation:
        return device_only(model, test.expression)
    return support_checks(model, test) == {"device"}


def mentioned_props(model, test: cst.CSTNode) -> set[str]:
    """Every input property ``test`` reads, compared with anything."""
    out = set()
    for node in _walk(test):
        kind = prop_kind(model, node) if type(node) in (cst.Attribute, cst.Call, cst.Name) else None
        if kind:
            out.add(kind)
    return out


def is_guard(model, test: cst.CSTNode) -> bool:
    """Whether an ``if`` test asks if the kernel supports the input: a dtype, device, shape or head
    size compared with constants, a layout check, or a ``supported``/``can_use``-style name (not a
    config flag, a rank-based case split or a comparison between arguments)."""
    if support_checks(model, test) or "layout" in mentioned_props(model, test):
        return True
    if any(type(n) in (cst.Name, cst.Attribute) and SUPPORT_NAME.search(
            n.value if type(n) is cst.Name else n.attr.value) for n in _walk(test)):
        return True
    return any(support_checks(model, value) for value in _local_flags(model, test))


def _local_flags(model, test: cst.CSTNode) -> list[cst.CSTNode]:
    """The values of the local names a test reads that its function binds once to a boolean
    expression (``use_fast = x.dtype == torch.bfloat16 and ...`` then ``if not use_fast:``)."""
    fn = model.enclosing_function(test)
    names = {n.value for n in _walk(test) if type(n) is cst.Name}
    if fn is None or not names:
        return []
    found: dict[str, list[cst.CSTNode]] = {}
    for n in _walk(fn.body):
        if type(n) is cst.Assign and len(n.targets) == 1 and type(n.targets[0].target) is cst.Name \
                and n.targets[0].target.value in names:
            found.setdefault(n.targets[0].target.value, []).append(n.value)
    return [values[0] for values in found.values()
            if len(values) == 1 and type(values[0]) in (cst.BooleanOperation, cst.Comparison, cst.UnaryOperation)]


# -- announcing ------------------------------------------------------------------------------------


def is_announcer(model, call: cst.Call) -> bool:
    if model.log_kind(call):
        return True
    name = model.call_name(call) or ""
    if type(call.func) is cst.Attribute and call.func.attr.value in ANNOUNCE_METHODS and (
        "log" in (model.dotted(call.func.value) or "").lower()
    ):
        return True
    if name.split(".")[-1] in ("warning_once", "warn_once", "info_once", "print_warning_once"):
        return True
    return configured_announcer(model, name)


def configured_announcer(model, name: str) -> bool:
    """Whether ``name`` is one of the configured ``fallback-announcers`` (exact, by suffix or pattern)."""
    return any(name == entry or name.endswith("." + entry) or fnmatch.fnmatchcase(name, entry)
               for entry in model.config.fallback_announcers)


def announces(model, nodes: list[cst.CSTNode], depth: int = 3) -> bool:
    """Whether ``nodes`` (or the same-module helpers they call, memoized "once" helpers included)
    log, warn or print."""
    seen: set[int] = set()
    stack = [(root, 0) for root in nodes]
    while stack:
        root, level = stack.pop()
        for node in _walk(root):
            if type(node) is not cst.Call:
                continue
            if is_announcer(model, node):
                return True
            target = model.callee(node)
            if target is not None and level < depth and id(target) not in seen:
                seen.add(id(target))
                stack.append((target.body, level + 1))
    return False


def computes(model, nodes: list[cst.CSTNode]) -> bool:
    """Whether a branch is a fallback computation: it calls something other than an announcer or
    an allocator (``return torch.empty(...)`` for empty input is not a fallback), does not raise,
    and does not look like another kernel (a name with triton/kernel/cuda/_C in it, or a lazy
    import: choosing between two kernels is dispatch, not a fallback)."""
    calls = False
    for root in nodes:
        for node in _walk(root):
            if type(node) is cst.Raise:
                return False
            if type(node) in (cst.Import, cst.ImportFrom):
                return False
            if type(node) is cst.Call and not is_announcer(model, node):
                name = (model.call_name(node) or "").lower()
                if OTHER_KERNEL.search(name) or id(node) in model.launch_sites:
                    return False
                if name.split(".")[-1] not in ALLOCATORS:
                    calls = True
    return calls


def empty_input_test(model, test: cst.CSTNode) -> bool:
    """Whether a test asks "is the input empty" (``x.shape[0] == 0``, ``x.numel() == 0``)."""
    for node in _walk(test):
        if type(node) is cst.Comparison:
            sides = [node.left] + [t.comparator for t in node.comparisons]
            if any(type(n) is cst.Integer and n.value == "0" for n in sides) and any(
                (prop_kind(model, n) == "shape" and type(n) is not cst.BinaryOperation) or _numel(n) for n in sides
            ):
                return True
        elif type(node) is cst.UnaryOperation and type(node.operator) is cst.Not and _numel(node.expression):
            return True
    return False


def _numel(node: cst.CSTNode) -> bool:
    return type(node) is cst.Call and (
        type(node.func) is cst.Attribute and node.func.attr.value in ("numel", "nelement")
        or type(node.func) is cst.Name and node.func.value == "len"
    )


def statements(suite) -> list[cst.CSTNode]:
    return list(suite.body) if type(suite) is cst.IndentedBlock else list(getattr(suite, "body", []))


def fallback_branches(model, disp: Dispatcher) -> Iterator[tuple[cst.If, list[cst.CSTNode]]]:
    """``(if, fallback statements)`` for each input guard in ``disp`` that picks between the kernel
    and a fallback: ``if/else`` with the kernel on one side only, or an early ``return`` before it."""
    for node in _walk(disp.function.body):
        if type(node) is not cst.If or not is_guard(model, node.test) or empty_input_test(model, node.test):
            continue
        if type(node.orelse) is cst.If or type(model.parent(node)) is cst.If or _names_backend(node.test):
            continue  # an elif chain or a device-backend choice is multi-way dispatch, not a fallback
        body = statements(node.body)
        in_body = disp.dispatches(body)
        if type(node.orelse) is cst.Else:
            other = statements(node.orelse.body)
            in_other = disp.dispatches(other)
            if in_body != in_other:
                yield node, (other if in_body else body)
        elif node.orelse is None and not in_body and body and _returns(body[-1]):
            siblings = sibling_statements(model, node)
            index = next((i for i, s in enumerate(siblings) if s is node), None)
            later = siblings[index + 1:] if index is not None else []
            if disp.dispatches(later):
                yield node, body


def _names_backend(test: cst.CSTNode) -> bool:
    """Whether a test names a device backend other than CUDA (``x.device.type == "npu"``)."""
    return any(type(n) is cst.SimpleString and str(n.evaluated_value) in OTHER_DEVICES for n in _walk(test))


def sibling_statements(model, node: cst.CSTNode) -> list[cst.CSTNode]:
    """The statements of the block that holds ``node`` (empty for an ``elif``)."""
    parent = model.parent(node)
    if type(parent) in (cst.IndentedBlock, cst.Module):
        return list(parent.body)
    return []


def _returns(stmt: cst.CSTNode) -> bool:
    return type(stmt) is cst.SimpleStatementLine and any(type(s) is cst.Return for s in stmt.body)
