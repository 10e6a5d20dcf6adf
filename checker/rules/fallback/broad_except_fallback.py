from __future__ import annotations

import re

import libcst as cst

from kcheck.claims import BUILTINS, _walk
from kcheck.rule import Rule
from kcheck.model import walk
from kcheck.rules.fallback import (
    BROAD_EXCEPTIONS, PROBE_NAME, TEST_OR_BENCH, dispatchers, is_announcer, sibling_statements, statements, warns,
)
from kcheck.rules.fallback.kernel_imports import (
    announced_by_callers, announced_where_read, answers_no, keeps_error, loads_kernel, nothing_to_fall_back_to, version_shim,
    returns_reason,
)


class BroadExceptFallback(Rule):
    """A fallback reached by a bare or broad `except` around a kernel launch, import or build.

    ## What it does
    Reports a fallback reached by swallowing every error: a bare or broad `except` around a kernel
    launch, a kernel import, set-up or build whose handler goes on another way without re-raising
    or saying so above debug level. Every failure, a real bug in the kernel included, silently
    becomes the slow path.

    In detail, it finds `try` blocks whose body launches a specialised kernel (directly, through a
    same-module helper, or by calling a function imported from a kernel module or library, or one of the
    project the index sees launch a kernel) with a handler that catches everything — a bare `except:`,
    `except Exception` or `except BaseException` — and computes a replacement result instead of
    re-raising, or answers a constant (`return None`) that a caller takes as its cue to compute one
    (unless every caller raises on that answer). Also `try` blocks, at import or in a function, that import a kernel module (the
    project's extension, `_C`, `ops`, `kernels`, `fused_*` or Triton-kernel modules, and third-party
    kernel libraries such as AITER, FlashAttention, FlashInfer, DeepGEMM, Apex or Transformer
    Engine, bitsandbytes, GemLite; not the compilers themselves; also `from vendor import _custom_ops`
    and `importlib.import_module(f"pkg.kernels.{device}")`), set one up (a call into such a library from outside
    it, `aiter.init_custom_qr(...)`, not a query such as `get_gfx()`), or build or fetch one
    (`load_inline`, `cpp_extension.load`, `torch.ops.load_library`, `get_kernel`, `load_jit`,
    `torch.compile` with its first call, `tvm.build`, `tilelang.compile`, or a function of the module whose body calls one of
    these), whose broad handler neither
    re-raises, warns, keeps the error (stores it, hands it on or returns it: a message made
    from it and logged at debug is not kept) nor returns a reason (`return False, "requires aiter"`):
    every later call silently takes the slower path. Tests, which guard imports of what they
    test, and benchmarks, which leave out a provider they cannot import, are left alone (also in a
    module only the benchmark beside it imports, a problem's `sota.py`, unless a caller there times
    another implementation in the provider's place when it fails), and so
    is a capability probe (`is_*`,
    `has_*`, `*_available`) whose caller in the module tests its answer and announces the choice;
    a probe whose False nobody announces is reported. Names a probe imports inside a function are
    its own: a method that imports the same kernel again is another binding, and the probe's use
    after the `try` runs only when the import worked. A module whose name starts with `cuda` is a
    binding or helper, not a kernel, and one whose name merely ends in the letters "ext"
    (`forward_context`) is not an extension.

    Also left alone: a `try` that only changes how a kernel runs (a CUDA graph capture) while the
    surrounding block or the handler launches the same kernel eagerly; a handler that imports the
    same kernel library under another version's module path; a kernel library's own non-kernel
    modules imported inside that library; a device guard used as a `with` item; an import whose
    bound names are tested by `if`s that all warn on the path they take; an import after whose
    failure every use raises (its flag read only by `assert HAVE_TE` or `if not HAVE_TE: raise`,
    what it imported used where nothing tests the import first, or set to None and called just
    after `assert fused_rope is not None`): a late error, not a slower path; an import whose flag,
    probe or names are read only by other modules of the project, each of which raises or warns
    when the name says "missing" (`if not HAVE_DEEPEP: raise ImportError(...)`) or only calls what
    it imported; and an import-only loader answering None whose every caller raises on that answer.

    ## Why is this bad?
    The handler cannot tell "this input is not supported" from a bug: a wrong argument, an
    out-of-memory error, a Triton compile failure, an illegal memory access that leaves the CUDA
    context unusable. All of them quietly become the fallback, so a broken kernel looks like a
    slow one and benchmarks of "the kernel" measure the reference. Decide support with an explicit
    check before the launch, and let real errors propagate.

    ## Example
    ```python
    try:
        out = torch.ops.my_ext.fused_moe(x, w1, w2, topk_ids)
    except Exception:
        out = fused_moe_reference(x, w1, w2, topk_ids)
    ```

    ## Use instead
    ```python
    if _fused_moe_supported(x, w1):
        out = torch.ops.my_ext.fused_moe(x, w1, w2, topk_ids)
    else:
        _warn_once("fused_moe: using the reference for this input")
        out = fused_moe_reference(x, w1, w2, topk_ids)
    ```
    """

    CODE = "KC303"
    NAME = "broad-except-fallback"
    MESSAGE = "{handler} around {kernel} swallows every error, bugs and CUDA faults included, into the fallback"
    SEVERITY = "warning"
    PREVIEW = True  # below the bar on the test split: benchmarks/results/evaluation-test.md
    KNOWLEDGE = ("triton-cuda/declared-fallbacks",)
    VALID = [
        """
import torch
try:
    from sgl_kernel import silu_and_mul as _silu_and_mul
except ImportError:
    _silu_and_mul = None
""",
        """
import torch
def moe(x, w):
    try:
        return torch.ops.my_ext.fused_moe(x, w)
    except Exception:
        log_failure(x)
        raise
""",
        """
import torch
def dispatch_stack_active():
    try:
        return int(torch._C._len_torch_dispatch_stack()) > 0
    except Exception:
        return True
""",
        """
import torch
def publish(ready, words):
    error = None
    try:
        torch.ops.symm_mem.memset32_(ready, 0, 0, words)
    except Exception as exc:
        error = str(exc)
    return error
""",
        """
import torch
def moe(x, w):
    try:
        return torch.ops.my_ext.fused_moe(x, w)
    except Exception as exc:
        if not isinstance(exc, NotImplementedError):
            raise
    return moe_reference(x, w)
""",
    ]
    INVALID = [
        """
import torch
def moe(x, w):
    try:
        return torch.ops.my_ext.fused_moe(x, w)
    except Exception:
        return moe_reference(x, w)
""",
        """
import torch
def moe(x, w, strict=False):
    try:
        return torch.ops.my_ext.fused_moe(x, w)
    except Exception as exc:
        if strict:
            raise
        log.debug("fused_moe failed: %s", exc)
    return moe_reference(x, w)
""",
        """
import torch
class MoE:
    def forward(self, x, w):
        if self._fused:
            try:
                return torch.ops.my_ext.fused_moe(x, w)
            except Exception:
                self._fused = False
        return moe_reference(x, w)
""",
        """
def pack(w):
    try:
        from .pack_block_ext import pack_block
        return pack_block(w)
    except Exception as exc:
        log.debug("native packer unavailable (%s), using Python", exc)
    return pack_python(w)
""",
        """
import torch
def moe(x, w):
    try:
        out = torch.ops.my_ext.fused_moe(x, w)
    except:
        out = moe_reference(x, w)
    return out
""",
    ]
    PREFILTER = (r"\bexcept\b",)
    NEEDS = ("dispatcher", "kernel import under try")

    def leave_Module(self, original_node: cst.Module) -> None:
        model = self.model
        reported: set[int] = set()
        # a test's or benchmark's guard skips, records or leaves out; a benchmark's helper module
        # (``sota.py`` beside ``benchmark.py``) is held to it unless its answer makes a caller
        # substitute another implementation for the one the benchmark names
        testing = bool(TEST_OR_BENCH.search(model.path))
        harness = bool(model.config.harness)
        for disp in () if testing else dispatchers(model, claimed=False):
            for node in _walk(disp.function.body):
                if type(node) is not cst.Try or not disp.dispatches(statements(node.body)):
                    continue
                for handler in node.handlers:
                    caught = _broad(model, handler)
                    if caught and not _reraises(handler) and (
                            _falls_back(model, handler, node) or _answers(handler) and not _callers_refuse(model, node)) \
                            and id(handler) not in reported and not _same_kernel_on_route(model, node, handler) \
                            and not _says_orends(model, handler, say=_answers(handler)) \
                            and not (harness and not _substitutes(model, node)):
                        reported.add(id(handler))
                        self.report(handler, handler=caught, kernel=disp.label)
        for node in () if testing else walk(original_node):
            if type(node) is not cst.Try:
                continue
            what = loads_kernel(model, statements(node.body))
            if what is None:
                continue
            probe = model.enclosing_function(node)
            if probe is not None and (PROBE_NAME.search(probe.name.value) or any(
                    answers_no(h) for h in node.handlers)) and announced_by_callers(model, probe):
                continue  # a capability probe whose callers say what they chose
            for handler in node.handlers:
                caught = _broad(model, handler)
                body = statements(handler.body)
                if caught and id(handler) not in reported and not _reraises(handler) and not version_shim(
                    model, node, handler) and not warns(
                    model, body
                ) and not _says_orends(model, handler) and not keeps_error(model, handler) and not returns_reason(handler) \
                        and not nothing_to_fall_back_to(model, node, handler) \
                        and not announced_where_read(model, node, handler) and not _refused_by_callers(model, node, handler) \
                        and not (harness and not _substitutes(model, node)):
                    self.report(handler, handler=caught, kernel=what)


def _kernel_calls(model, nodes, depth: int = 1) -> dict[str, int]:
    """Names of the calls in ``nodes`` that launch a kernel or call a same-module helper that does
    (and, ``depth`` helpers down, the calls those helpers make), with how many times each is written."""
    dispatching = {id(d.function) for d in dispatchers(model, claimed=False)}
    found: dict[str, int] = {}
    stack = [(root, 0) for root in nodes]
    while stack:
        root, level = stack.pop()
        for n in _walk(root):
            if type(n) is not cst.Call:
                continue
            target = model.callee(n)
            if id(n) in model.launch_sites or target is not None and id(target) in dispatching:
                name = model.dotted(n.func) or ""
                found[name] = found.get(name, 0) + 1
                if target is not None and level < depth:
                    stack.append((target.body, level + 1))
    return found


def _same_kernel_on_route(model, node: cst.Try, handler: cst.ExceptHandler) -> bool:
    """Whether the route the handler leaves to launches the same kernel the ``try`` does: the
    ``try`` guards only a way of running it (a CUDA graph capture, a warm-up) and the block around
    it, or the handler, launches the kernel eagerly (``self._run(x)`` after a failed capture, or
    ``out = _launch(...)`` before it). A bug in the kernel still fails there; nothing slower is chosen."""
    tried = set(_kernel_calls(model, statements(node.body)))
    if not tried:
        return False
    route = [s for s in sibling_statements(model, node) if s is not node] + statements(handler.body)
    fn = model.enclosing_function(node)
    current = node
    for anc in model.ancestors(node):  # and what follows each enclosing statement, up to the function
        if anc is fn or type(anc) in (cst.FunctionDef, cst.ClassDef, cst.Module):
            break
        if type(anc) in (cst.If, cst.For, cst.While, cst.With, cst.Try) and anc is not current:
            siblings = sibling_statements(model, anc)
            if anc in siblings:
                route += siblings[siblings.index(anc) + 1:]
            current = anc
    return bool(tried & set(_kernel_calls(model, route, depth=0)))


def _raises(stmt) -> bool:
    return type(stmt) is cst.SimpleStatementLine and type(stmt.body[0]) is cst.Raise


def _refused_by_callers(model, node: cst.Try, handler: cst.ExceptHandler) -> bool:
    """Whether a loader that answers None on failure (``except Exception: return None``) is called
    only where a None answer ends in a ``raise`` within the next few statements (``out =
    _try_lib(x)``, ``if out is not None: return out``, ``raise RuntimeError("... unavailable")``):
    the failure is loud, not a slower path."""
    if not _answers(handler) or not all(
            type(s) is cst.SimpleStatementLine and all(type(x) in (cst.Import, cst.ImportFrom) for x in s.body)
            for s in statements(node.body)):
        return False  # only a loader that just imports: around a call, a kernel bug would read as "unavailable"
    return _callers_refuse(model, node)


def _substitutes(model, node: cst.CSTNode) -> bool:
    """Whether a caller of the function around ``node``, right after the call, returns another
    computation that does not read the answer (``out = _liger(x)``; ``if out is not None: return
    out``; ``return _compiled(x)``): the failure swaps in another implementation."""
    for stmt, later in _after_callers(model, node):
        answer = {t.target.value for small in getattr(stmt, "body", ()) if type(small) is cst.Assign
                  for t in small.targets if type(t.target) is cst.Name}
        for s in later:
            for small in s.body if type(s) is cst.SimpleStatementLine else ():
                if type(small) is cst.Return and type(small.value) is cst.Call and answer and not any(
                        type(n) is cst.Name and n.value in answer for n in walk(small.value)):
                    return True
    return False


def _after_callers(model, node: cst.CSTNode):
    """For each caller of the function around ``node``: the statement that holds the call and the
    (up to three) statements after it in its block; ``(None, [])`` where the call is not a
    statement of a block (``return f(x) is not None``)."""
    fn = model.enclosing_function(node)
    for call in model.callers(fn) if fn is not None else ():
        stmt = next((a for a in model.ancestors(call) if type(a) is cst.SimpleStatementLine), None)
        siblings = sibling_statements(model, stmt) if stmt is not None else []
        yield (stmt, siblings[siblings.index(stmt) + 1:][:3]) if stmt in siblings else (None, [])


def _callers_refuse(model, node: cst.CSTNode) -> bool:
    """Whether every caller of the function around ``node`` (at least one in the module) raises
    within the next few statements after the call: a constant answer (``return None``) ends in an
    error there, not in another way of computing the result."""
    after = list(_after_callers(model, node))
    return bool(after) and all(stmt is not None and any(
        _raises(s) or type(s) is cst.If and any(_raises(x) for x in statements(s.body)) for s in later)
        for stmt, later in after)


# Calls that end the process or the test: the failure stops the run instead of falling back.
ENDS = {"sys.exit", "exit", "quit", "os._exit", "os.abort", "pytest.skip", "pytest.fail", "pytest.exit",
        "pytest.xfail"}
ENDS_NAME = re.compile(r"(^|_)(and_)?(exit|abort)$")  # ``self.log_and_exit(e)`` of a base class elsewhere


def _says_orends(model, handler: cst.ExceptHandler, say: bool = True, depth: int = 2) -> bool:
    """Whether the handler, or a same-module helper it calls (``self._disable(e)``,
    ``self.log_and_exit(e)``), ends the process or test, or (``say``) announces at a level a user
    sees: the failure is visible, not a silent fallback. Around a launch a warning counts only where
    the handler answers with a constant (:func:`_answers`): a warning beside a replacement computed
    per call still lets a CUDA fault or a bug pass as the fallback."""
    seen: set[int] = set()
    stack = [(s, 0) for s in statements(handler.body)]
    while stack:
        root, level = stack.pop()
        if type(root) in (cst.FunctionDef, cst.ClassDef):
            continue  # defining a replacement announces nothing
        if say and warns(model, [root]):
            return True
        for n in _walk(root):
            if type(n) is not cst.Call:
                continue
            name = model.call_name(n) or model.dotted(n.func) or ""
            if name in ENDS or ENDS_NAME.search(name.rsplit(".", 1)[-1]):
                return True
            target = model.callee(n)
            if target is not None and level < depth and id(target) not in seen:
                seen.add(id(target))
                stack.extend((s, level + 1) for s in statements(target.body))
    return False


def _answers(handler: cst.ExceptHandler) -> bool:
    """The handler ends by answering its caller with a constant (``return False``, ``return None``,
    ``return``) instead of computing a replacement: a set-up or probe that says no. Announced, that
    is the once-per-cause fallback the family asks for."""
    body = statements(handler.body)
    last = body[-1] if body else None
    if type(last) is not cst.SimpleStatementLine or type(last.body[-1]) is not cst.Return:
        return False
    value = last.body[-1].value
    return value is None or type(value) is cst.Name and value.value in ("False", "None", "True")


def _falls_back(model, handler: cst.ExceptHandler, node: cst.Try) -> bool:
    """Whether the handler falls back: it computes a replacement result (calls something other than
    a logger or a builtin such as ``str(exc)``), switches the kernel path off for later calls
    (``self._fused = False``), or lets the code after a ``try`` whose body returns run instead."""
    body = statements(handler.body)
    if any(type(n) is cst.Call and not is_announcer(model, n) and not (
            type(n.func) is cst.Name and n.func.value in BUILTINS) for s in body for n in _walk(s)):
        return True
    simple = [small for s in body if type(s) is cst.SimpleStatementLine for small in s.body]
    if any(type(small) is cst.Assign and type(small.value) is cst.Name and small.value.value in ("False", "None")
           and any(type(t.target) in (cst.Attribute, cst.Subscript) for t in small.targets) for small in simple):
        return True
    tried = statements(node.body)
    returns = bool(tried) and type(tried[-1]) is cst.SimpleStatementLine and type(tried[-1].body[-1]) is cst.Return
    exits = any(type(small) in (cst.Return, cst.Raise, cst.Continue, cst.Break) for small in simple)
    return returns and not exits


def _reraises(handler: cst.ExceptHandler) -> bool:
    """Whether the handler re-raises: a ``raise`` at its top level, or under a test of the error it
    caught (``if not isinstance(exc, X): raise``, narrowing what it swallows). A ``raise`` under a
    setting (``if force_ext: raise``) leaves the other setting swallowing."""
    bound = handler.name.name.value if handler.name is not None and type(handler.name.name) is cst.Name else None
    stack = [(s, False, False) for s in statements(handler.body)]
    while stack:
        node, under_if, narrowed = stack.pop()
        if type(node) is cst.Raise and (narrowed or not under_if):
            return True
        if type(node) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
            continue
        if type(node) is cst.If:
            narrowed = narrowed or bool(bound) and any(type(n) is cst.Name and n.value == bound for n in _walk(node.test))
            under_if = True
        stack.extend((child, under_if, narrowed) for child in node.children)
    return False


def _broad(model, handler: cst.ExceptHandler) -> str | None:
    if handler.type is None:
        return "a bare `except:`"
    types = [e.value for e in handler.type.elements] if type(handler.type) is cst.Tuple else [handler.type]
    for t in types:
        name = model.dotted(t) or ""
        if name.split(".")[-1] in BROAD_EXCEPTIONS:
            return f"`except {name}`"
    return None
