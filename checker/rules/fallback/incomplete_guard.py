from __future__ import annotations

import re

import libcst as cst

from kcheck.claims import _walk
from kcheck.contracts import KEEPS
from kcheck.model import walk
from kcheck.rule import Rule
from kcheck.values import constant_test
from kcheck.rules.fallback import (
    DISPATCH_TEXT, claims_only, computes, device_only, dispatchers, is_guard, mentioned_props, sibling_statements,
    statements,
)


class IncompleteGuard(Rule):
    """A guard that checks only the device before a kernel that assumes more.

    ## What it does
    Reports a guard that sends inputs to a specialised kernel while checking less than the kernel
    assumes: only their device, or nothing of the dtype, sizes or value that the kernel's wrapper
    itself checks (in this module or another). Inputs that pass the guard but not the kernel's
    assumptions get a wrong result or a crash instead of the fallback beside the guard.

    In detail, it finds an `if` on the compute path of a kernel claim that replaces a library path (the
    `forward_cuda` of a `CustomOp`-style class beside its `forward_native`, a function under a
    configured `kernel-paths` entry, and the same-module helpers they call) that launches a
    specialised kernel, where the test that picks the kernel over the fallback checks only the
    device (`x.is_cuda`, `x.device.type == "cuda"`, `torch.cuda.is_available()`), and nothing
    else in the function checks the dtype, shape, rank, contiguity or strides the kernel was
    written for. Low-level op wrappers outside such a claim are not checked: a device branch
    there picks the platform, and the native op behind it checks its own inputs.

    The same holds across modules: where the kernel's wrapper checks what it was written for
    (`assert group_size in SUPPORTED`, `if x.dtype != torch.bfloat16: raise`: the project index's
    contracts, `kcheck.contracts`), a guard in the caller that picks the wrapper over a fallback
    computing the same result (both branches return, or assign one name), on a test of what the input
    or the machine supports (a dtype, device, shape or size compared with constants, a layout, a
    `supported`/`can_use`-style name; not a backend the user or the configuration chose), and says nothing of those
    properties of the caller's own parameters sends every other input into that check, which stops
    the call there instead of reaching the fallback. What the caller builds itself, and contiguity
    (which callers ensure), are not asked; a predicate the guard calls with the argument
    (`if self._use_triton(x):`) counts as checking it. The finding names the check and where it is.

    A check that can never stop anything checks less than anything the kernel assumes. In a module
    that launches kernels it reports a test whose truth never changes (a tensor predicate tested
    without being called, `b.is_contiguous`; an `assert` on a tuple; a dtype constant in an `or`,
    `x.dtype == torch.float16 or torch.bfloat16`) and an `if` whose body only makes an exception
    without raising it or builds an error message that nothing after it raises, logs or returns.

    ## Why is this bad?
    Being on the GPU is the least a kernel needs. A Triton or CUDA kernel is written for some
    dtypes, a contiguous last dimension, a maximum block size or head size; a CUDA tensor outside
    those still takes the kernel path, where it fails to compile, raises deep inside the launch,
    or silently reads the wrong elements. The guard should state everything the kernel assumes,
    so that everything else reaches the fallback.

    ## Example
    ```python
    class Gelu(CustomOp):
        def forward_native(self, x):
            return torch.nn.functional.gelu(x)

        def forward_cuda(self, x):
            if x.is_cuda:
                return _gelu_triton(x)
            return torch.nn.functional.gelu(x)
    ```

    ## Use instead
    ```python
    class Gelu(CustomOp):
        def forward_native(self, x):
            return torch.nn.functional.gelu(x)

        def forward_cuda(self, x):
            if x.is_cuda and x.dtype in SUPPORTED_DTYPES and x.is_contiguous():
                return _gelu_triton(x)
            _warn_once("gelu: using torch for this input")
            return torch.nn.functional.gelu(x)
    ```
    """

    CODE = "KC302"
    NAME = "incomplete-guard"
    MESSAGE = ("the only check before {kernel} is the device; the dtype, shape and layout the kernel "
               "assumes reach it unchecked")
    SEVERITY = "warning"
    PREVIEW = True  # below the bar on the test split: benchmarks/results/evaluation-test.md
    KNOWLEDGE = ("triton-cuda/declared-fallbacks",)
    VALID = [
        """
import torch
class RMSNorm(CustomOp):
    def forward_native(self, x):
        return rms_norm_reference(x, self.w, self.eps)
    def forward_cuda(self, x):
        if x.is_cuda and x.dtype in (torch.float16, torch.bfloat16) and x.is_contiguous():
            return torch.ops._C.rms_norm(x, self.w, self.eps)
        return rms_norm_reference(x, self.w, self.eps)
""",
        """
import torch
class RMSNorm(CustomOp):
    def forward_native(self, x):
        return rms_norm_reference(x, self.w, self.eps)
    def forward_cuda(self, x):
        assert x.stride(-1) == 1
        if not x.is_cuda:
            return rms_norm_reference(x, self.w, self.eps)
        return torch.ops._C.rms_norm(x, self.w, self.eps)
""",
        """
import torch
def rms_norm(x, w, eps):
    if x.is_cuda:
        return torch.ops._C.rms_norm(x, w, eps)
    return rms_norm_reference(x, w, eps)
""",
    ]
    INVALID = [
        """
import torch
import triton
from .kernels import _w4_kernel

def w4_gemm(x, qweight, scales):
    group_size = qweight.shape[0] * 8 // scales.shape[0]
    assert group_size in (64, 128)
    y = torch.empty(x.shape[0], scales.shape[1], device=x.device, dtype=x.dtype)
    _w4_kernel[(triton.cdiv(y.numel(), 256),)](x, qweight, scales, y, y.numel(), BLOCK=256)
    return y

def quant_linear(x, qweight, scales):
    if x.is_cuda and x.dtype == torch.float16:
        return w4_gemm(x, qweight, scales)
    return x @ dequantize(qweight, scales).to(x.dtype)
""",
        """
import torch
class RMSNorm(CustomOp):
    def forward_native(self, x):
        return rms_norm_reference(x, self.w, self.eps)
    def forward_cuda(self, x):
        if x.is_cuda:
            return torch.ops._C.rms_norm(x, self.w, self.eps)
        return rms_norm_reference(x, self.w, self.eps)
""",
    ]
    PREFILTER = (DISPATCH_TEXT, r"\bif\b")  # a guard is an ``if``; the declared facts decide the rest
    NEEDS = ("claimed dispatcher", "dispatcher meets demands", "dispatcher")

    def leave_Module(self, original_node: cst.Module) -> None:
        model = self.model
        for disp in dispatchers(model):
            guards, other_checks = [], False
            for node in _walk(disp.function.body):
                test = getattr(node, "test", None) if type(node) in (cst.If, cst.Assert, cst.IfExp, cst.While) else None
                if test is not None:
                    if type(node) is cst.If and device_only(model, test):
                        guards.append(node)
                    elif mentioned_props(model, test) - {"device"}:
                        other_checks = True
                elif type(node) is cst.Call and type(node.func) is cst.Attribute and (
                    node.func.attr.value in ("contiguous", "view", "reshape", "flatten", "to", "float", "half")
                ):
                    other_checks = True  # the wrapper normalises layout or dtype itself
            if other_checks or not claims_only(model, disp.function):
                continue  # at a module's forward a device test is dispatch by device
            for node in guards:
                if _picks_kernel(model, disp, node):
                    self.report(node.test, kernel=disp.label)
        if model.config.demands:
            self._demands_unchecked()
        if dispatchers(model, claimed=False):
            self._checks_that_never_stop()

    def _checks_that_never_stop(self) -> None:
        """In a module that launches kernels, checks that cannot stop any input: a test whose truth
        never changes, or an ``if`` that only builds an error or its message and never raises it."""
        model = self.model
        for defs in model.functions.values():
            for fn in defs:
                if fn in model.triton_kernels or fn in model.dsl_kernels:
                    continue
                for node in _walk(fn.body):
                    if type(node) not in (cst.If, cst.Assert, cst.While):
                        continue
                    why = constant_test(model, node.test)
                    if why is None and type(node) is cst.If:
                        why = _unraised(model, fn, node)
                    if why is not None:
                        self.report(node.test, message=(
                            f"this check can never stop an input: {why}; what it was written to refuse reaches "
                            "the kernel"))

    def _demands_unchecked(self) -> None:
        """Guards that pick a call whose callee demands what the guard never checks."""
        model = self.model
        wanted: dict[tuple[str, str], tuple] = {(fn, text): found for fn, text, found in model.config.demands}
        for disp in dispatchers(model, claimed=False):
            scope = model.scope_names.get(id(disp.function), disp.function.name.value)
            calls = {text for fn, text in wanted if fn == scope}
            if not calls:
                continue
            checked = _checked(model, disp.function)
            params = {p.name.value for p in (*disp.function.params.posonly_params, *disp.function.params.params,
                                             *disp.function.params.kwonly_params)}
            for node in _walk(disp.function.body):
                if type(node) is not cst.If or not is_guard(model, node.test) \
                        or not _picks_kernel(model, disp, node, any_guard=True) or not _alternatives(model, node):
                    continue  # a user's or a configuration's choice of backend is not a capability guard
                for call in _walk(node.body):
                    text = model.dotted(call.func) if type(call) is cst.Call else None
                    if text not in calls:
                        continue
                    gap = next((d for d in wanted[(scope, text)] if _unchecked(model, call, d, checked, params)), None)
                    if gap is not None:
                        _pos, param, prop, where = gap
                        self.report(node.test, message=(
                            f"the guard picks {text}() without checking the {_WHAT[prop]} of what it passes as "
                            f"`{param}`, which {where.split(' ', 1)[1]}() demands ({where.split(' ', 1)[0]}); "
                            "inputs outside it stop there instead of reaching the fallback"))
                        break


ERROR_CLASS = re.compile(r"(Error|Exception)$")
MESSAGE_NAME = re.compile(r"(^|_)(msg|message|err|error|errmsg|reason|problem)s?$", re.I)
LOOPS = (cst.For, cst.While)


def _unraised(model, function: cst.FunctionDef, node: cst.If) -> str | None:
    """Why an ``if`` with no ``else`` does nothing, or None: its body only makes an exception
    (``ValueError(...)`` with no ``raise``) or binds an error message (``msg = f"..."``) that
    nothing after it reads (in a loop, nothing else in the function)."""
    if node.orelse is not None:
        return None
    made, messages = None, set()
    for stmt in statements(node.body):
        for small in getattr(stmt, "body", None) if type(stmt) is cst.SimpleStatementLine else [None]:
            if type(small) is cst.Expr and type(small.value) is cst.Call:
                func = small.value.func
                name = func.value if type(func) is cst.Name else func.attr.value if type(func) is cst.Attribute else ""
                if ERROR_CLASS.search(name):
                    made = name
                    continue
            if type(small) is cst.Assign and len(small.targets) == 1 and type(small.targets[0].target) is cst.Name \
                    and MESSAGE_NAME.search(small.targets[0].target.value) \
                    and type(small.value) in (cst.SimpleString, cst.FormattedString, cst.ConcatenatedString):
                messages.add(small.targets[0].target.value)
                continue
            return None
    if made:
        return f"it makes a `{made}` and never raises it"
    if not messages:
        return None
    looped = False
    for outer in model.ancestors(node):
        if outer is function:
            break
        looped = looped or type(outer) in LOOPS
    inside, seen = {id(n) for n in walk(node)}, looped
    for n in walk(function.body):  # closures defined further down read it too
        seen = seen or n is node
        if seen and id(n) not in inside and type(n) is cst.Name and n.value in messages:
            return None  # read after the ``if`` (``raise ValueError(msg)`` further down)
    return f"it builds `{sorted(messages)[0]}` and neither raises, logs nor returns it"


_WHAT = {"dtype": "dtype", "layout": "layout", "shape": "sizes", "value": "value"}


def _checked(model, function: cst.FunctionDef) -> set[tuple[str, str]]:
    """(root, property) for what any test or normalisation in the function reads of a name:
    ``x.dtype`` -> (x, dtype); a bare ``g`` -> (g, value) and (g, shape); ``x.shape`` -> (x, shape);
    ``x.contiguous()`` -> (x, layout); ``x.to(...)`` -> (x, dtype)."""
    out: set[tuple[str, str]] = set()
    sizes: dict[str, set[str]] = {}  # a local bound from sizes (``g = w.shape[0] // s.shape[0]``) -> whose
    for node in _walk(function.body):
        if type(node) is cst.Assign and len(node.targets) == 1 and type(node.targets[0].target) is cst.Name:
            roots = {model.dotted(n.value) for n in _walk(node.value)
                     if type(n) is cst.Attribute and n.attr.value in ("shape", "size")} - {None}
            if roots:
                sizes[node.targets[0].target.value] = roots
    for node in _walk(function.body):
        test = getattr(node, "test", None) if type(node) in (cst.If, cst.Assert, cst.IfExp, cst.While) else None
        if test is not None:
            for n in _walk(test):
                if type(n) is cst.Attribute:
                    root = model.dotted(n.value)
                    if root:
                        prop = {"dtype": "dtype", "shape": "shape", "ndim": "shape", "is_contiguous": "layout",
                                "stride": "layout", "size": "shape", "dim": "shape"}.get(n.attr.value)
                        out.add((root, prop) if prop else (root, "value"))
                    text = model.dotted(n)
                    if text:
                        out |= {(text, "value"), (text, "shape")}
                elif type(n) is cst.Name:
                    out |= {(n.value, "value"), (n.value, "shape")}
                    out |= {(root, "shape") for root in sizes.get(n.value, ())}
                elif type(n) is cst.Call:  # ``if self._use_triton(x):``: the predicate may check anything of x
                    out |= {(name, prop) for a in n.args if type(a.value) is cst.Name
                            for name in [a.value.value] for prop in ("dtype", "shape", "value", "layout")}
        if type(node) is cst.Call and type(node.func) is cst.Attribute:
            root = model.dotted(node.func.value)
            attr = node.func.attr.value
            if root and attr in ("contiguous", "reshape"):
                out.add((root, "layout"))
            if root and attr in ("to", "float", "half", "bfloat16", "type"):
                out.add((root, "dtype"))
    return out


def _alternatives(model, node: cst.If) -> bool:
    """Whether the guard's branch and what runs otherwise are two ways to one result: both branches
    return, or assign one name (``if ok: out = kernel(x) else: out = ref(x)``), or the branch returns
    and the statements after the ``if`` return too. A branch that does extra work and carries on
    (``if fp8_fnuz: w = normalize(w)``) is a step, not an alternative to a fallback."""
    def ends(stmts) -> str | None:
        last = stmts[-1] if stmts else None
        inner = last.body[0] if type(last) is cst.SimpleStatementLine and last.body else None
        return "return" if type(inner) is cst.Return else None

    def assigned(stmts) -> set[str]:
        return {t.target.value for s in stmts for a in _walk(s)
                if type(a) is cst.Assign for t in a.targets if type(t.target) is cst.Name}

    body = statements(node.body)
    if type(node.orelse) is cst.Else:
        other = statements(node.orelse.body)
        return ends(body) == ends(other) == "return" or bool(assigned(body) & assigned(other))
    if node.orelse is not None:  # ``elif``: the next test picks among the others
        return ends(body) == "return" or bool(assigned(body))
    siblings = sibling_statements(model, node)
    index = next((i for i, s in enumerate(siblings) if s is node), None)
    later = siblings[index + 1:] if index is not None else []
    return ends(body) == "return" and any(
        type(s) is cst.SimpleStatementLine and any(type(a) is cst.Return for a in s.body) for s in later)


def _unchecked(model, call: cst.Call, demand: tuple, checked: set[tuple[str, str]], params: set[str]) -> bool:
    """Whether the argument the demand is about is one of the function's parameters (an input from
    outside: what the function makes itself, it knows) whose property nothing checked."""
    position, param, prop, _where = demand
    if prop == "layout":
        return False  # a wrapper's contiguity assert guards tensors its callers make contiguous (dev trees)
    positional = [a for a in call.args if a.keyword is None and not a.star]
    if any(a.star for a in call.args):
        return False
    arg = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == param), None)
    if arg is None and 0 <= position < len(positional):
        arg = positional[position].value
    if arg is None:
        return False
    while type(arg) is cst.Call and type(arg.func) is cst.Attribute and arg.func.attr.value in KEEPS:
        if prop == "dtype" and arg.func.attr.value in ("to", "float", "half", "bfloat16"):
            return False  # the caller casts it
        arg = arg.func.value
    root = arg.value if type(arg) is cst.Name else None
    if root not in params:
        return False
    return (root, prop) not in checked and not (prop == "shape" and (root, "value") in checked)


def _picks_kernel(model, disp, node: cst.If, any_guard: bool = False) -> bool:
    """Whether the guard chooses between the kernel and a fallback that computes the result (with
    ``any_guard``, whatever it tests; otherwise only a test about CUDA)."""
    if not any_guard and not _about_cuda(model, node.test):
        return False  # a choice between device backends (npu, xpu, cpu), not a kernel's guard
    body = statements(node.body)
    if type(node.orelse) is cst.Else:
        other = statements(node.orelse.body)
        if disp.dispatches(body) == disp.dispatches(other):
            return False
        return computes(model, other if disp.dispatches(body) else body)
    if node.orelse is not None:
        return False
    siblings = sibling_statements(model, node)
    index = next((i for i, s in enumerate(siblings) if s is node), None)
    later = siblings[index + 1:] if index is not None else []
    if disp.dispatches(body):  # the kernel under the guard, the fallback after it (not another kernel)
        return computes(model, later) and not (any_guard and disp.dispatches(later))
    return disp.dispatches(later) and computes(model, body)


def _about_cuda(model, test: cst.CSTNode) -> bool:
    for n in _walk(test):
        if type(n) is cst.SimpleString and "cuda" in str(n.evaluated_value):
            return True
        if type(n) is cst.Attribute and n.attr.value == "is_cuda":
            return True
        if type(n) is cst.Call and (model.call_name(n) or "") == "torch.cuda.is_available":
            return True
    return False
