from __future__ import annotations

import libcst as cst

from kcheck.claims import _walk
from kcheck.rule import Rule
from kcheck.rules.fallback import (
    DISPATCH_TEXT, KIND_TEXT, MODEL_CODE, NOT_SERVED, availability_test, mentioned_props, dispatchers, statements, support_checks,
)

MISSING_MESSAGE = ("{stmt} that the kernel is installed{more} before {kernel}: a missing build should take a "
                   "declared fallback that says so once, not fail every call")
# What a model's own code does not settle (a ``models/`` folder fixes dtypes and shapes, not these).
UNSETTLED_BY_MODEL = {"available", "feature"}


class AssertOrRaiseWhereFallbackBelongs(Rule):
    """An `assert` or `raise` on the input's dtype, shape, head size or device where a new kernel replaces a library path.

    ## What it does
    Reports an `assert` or `raise` on the input's dtype, shape, head size or device, or on whether
    the kernel is installed, placed before a specialised kernel's launch on a path that replaced a
    library path every input used to reach. Those inputs now get an error where the old path gave
    a correct result: route them to the fallback instead.

    In detail, it finds `assert` statements, and `raise` statements under an `if`, on the compute path of a
    kernel claim that replaces a library path every input used to reach — the `forward_cuda` of a
    `CustomOp`-style class beside its `forward_native`, a function under a configured
    `kernel-paths` entry, or an entry point a model reaches (the `forward` of an `nn.Module` or an
    autograd `Function` that launches the kernel, outside tests, benchmarks, examples, one model's
    own `models/` code and other platforms' backends), and the same-module helpers they call —
    before the launch of a
    specialised kernel (a Triton launch, a `torch.ops` op, an inline extension, a kernel module
    such as `_custom_ops`), whose test compares the input's dtype, device, shape or head size
    with a constant: a supported set, a size limit, an alignment. Checks that compare two
    arguments with each other (`a.dtype == b.dtype`), checks on output buffers and on index
    dtypes (`int64`, `uint8`), and dtype checks that accept fp32, fp16 and bf16 alike are contract
    checks and are left alone, as is a check an `if` around it has already made (`if ENABLED and
    n < 4096: assert n < 4096` cannot fail). A check whose way out lies elsewhere is left alone too: one in a
    branch of an `if` on the function's own flag whose both branches check the input
    (`if allow_fp32: assert ... else: assert ...`: the caller picks the contract), and a device check in a function registered with torch's
    dispatcher for a dispatch key (`lib.impl("aten::mean.dim", fn, "CUDA")`, `@torch.library.impl`:
    the dispatcher sends other devices' tensors to other implementations) or in a helper whose
    every same-module caller is so registered or tests the device first. A claim is reported
    once, at its first such check, with the number of checks.

    A wrapper outside such a claim is held to the same rule where the route is at hand: a check
    that lies in one branch of an `if` whose other branch computes the same call without refusing
    anything (a GEMV kernel beside the GEMM whose group size is refused, the library op beside the
    kernel) refuses what that branch would take; so does such a check in a model's own code. A
    quantized weight's group size counts among the input's properties, like the head size.

    Two checks no caller's dtype or shape settles are reported as well, also in a library's
    `models/` folder (where dtype and shape checks state the model's contract and are left alone):
    whether the kernel is installed (`assert AWQ_INSTALLED`, `if ext is None: raise`, `assert
    _is_triton_available()`), unless the check sits in a branch on a setting chosen where the kernel
    loaded (an invariant); and an optional input refused as not implemented in the entry point
    itself (`if attention_mask is not None: raise NotImplementedError`), which the path around the
    kernel could often take. Constructors are not read: a load-time refusal that names what is
    required is a capability contract more often than a missing fallback. Entry points include an autograd `Function`'s
    `backward` and the `__call__` of a class (an attention processor) that launches the kernel.

    Low-level op wrappers outside such a claim (including ops registered with
    `direct_register_custom_op` or `torch.library` so that `torch.compile` can trace them,
    `ModelNew` solutions and leaderboard `custom_kernel`s, which run on their task's fixed inputs)
    are not checked: their asserts state an internal contract their callers keep, and failing
    loudly when a caller breaks it is right.

    ## Why is this bad?
    A serving engine meets every dtype, head size and shape its models and users send. The
    library path the kernel replaces (`forward_native`) handled all of them; a `forward_cuda`
    that crashes on the ones its kernel does not support takes the server down (or, with
    `python -O`, lets the assert vanish and the kernel read garbage) where the old path would have
    answered. Unsupported input belongs on the declared fallback — the native implementation or a
    general kernel — that says once that it is being used.

    ## Example
    ```python
    class RMSNorm(CustomOp):
        def forward_native(self, x):
            return rms_norm_reference(x, self.weight, self.eps)

        def forward_cuda(self, x):
            assert x.dtype in (torch.float16, torch.bfloat16), "only half precision"
            return _rms_norm_triton(x, self.weight, self.eps)
    ```

    ## Use instead
    ```python
    class RMSNorm(CustomOp):
        def forward_native(self, x):
            return rms_norm_reference(x, self.weight, self.eps)

        def forward_cuda(self, x):
            if x.dtype not in (torch.float16, torch.bfloat16):
                _warn_once(f"rms_norm: no kernel for {x.dtype}, using the native path")
                return self.forward_native(x)
            return _rms_norm_triton(x, self.weight, self.eps)
    ```
    """

    CODE = "KC301"
    NAME = "assert-or-raise-where-fallback-belongs"
    MESSAGE = "{stmt} on {what}{more} before {kernel}: unsupported input should take a declared fallback, not fail"
    SEVERITY = "warning"
    PREVIEW = True  # below the bar on the test split: benchmarks/results/evaluation-test.md
    KNOWLEDGE = ("triton-cuda/declared-fallbacks",)
    VALID = [
        """
import torch
def silu_and_mul(x, out):
    assert out.shape == x.shape[:-1] + (x.shape[-1] // 2,)
    assert x.dtype == out.dtype
    torch.ops._C.silu_and_mul(out, x)
""",
        """
import logging
import torch
log = logging.getLogger(__name__)
def rms_norm(x, w, eps):
    if x.dtype not in (torch.float16, torch.bfloat16):
        log.warning("rms_norm: falling back to torch for %s", x.dtype)
        return rms_norm_reference(x, w, eps)
    torch.ops._C.rms_norm(x, w, eps)
""",
        """
def check_config(head_size):
    assert head_size in (64, 128, 256)
""",
        """
import torch
import triton
@triton.jit
def _kernel(x_ptr, n):
    pass
def scale(x):
    assert x.dtype in (torch.float16, torch.bfloat16), "half precision only"
    _kernel[(1,)](x, x.numel())
""",
    ]
    INVALID = [
        """
import torch
import triton
from vllm.model_executor.custom_op import CustomOp
@triton.jit
def _kernel(x_ptr, n):
    pass
class Scale(CustomOp):
    def forward_native(self, x):
        return x * 2
    def forward_cuda(self, x):
        assert x.dtype in (torch.float16, torch.bfloat16), "half precision only"
        _kernel[(1,)](x, x.numel())
        return x
""",
        """
import torch
from vllm import _custom_ops as ops
def _paged_attention(out, q, k_cache, v_cache, head_size):
    if head_size not in (64, 80, 96, 112, 128, 256):
        raise ValueError(f"unsupported head size {head_size}")
    ops.paged_attention_v1(out, q, k_cache, v_cache, head_size)
class PagedAttention:
    def forward_native(self, out, q, k_cache, v_cache, head_size):
        return paged_attention_reference(out, q, k_cache, v_cache)
    def forward_cuda(self, out, q, k_cache, v_cache, head_size):
        _paged_attention(out, q, k_cache, v_cache, head_size)
""",
    ]
    PREFILTER = (DISPATCH_TEXT, r"\bassert\b|\braise\b")
    NEEDS = ("claimed dispatcher", "dispatcher refusing a sibling route")

    def leave_Module(self, original_node: cst.Module) -> None:
        model = self.model
        registered = _registered_impls(model)
        model_code = bool(MODEL_CODE.search(model.path))
        claimed = dispatchers(model, model_code=True)
        ids = {id(d.function) for d in claimed}
        # elsewhere, a wrapper that computes the same result on another branch of the same ``if``
        # (a library op, another kernel) has the route at hand: a check that refuses what that
        # branch takes is reported too
        others = [] if NOT_SERVED.search(model.path) else [
            d for d in dispatchers(model, claimed=False) if id(d.function) not in ids]
        for disp in [*claimed, *others]:
            sibling_only = id(disp.function) not in ids
            found = []  # (node to report, "assert"/"raise", kinds)
            for node, test, where, stmt in _checks_in(disp.function):
                if disp.dispatches(statements(node.body) if type(node) is cst.If else []):
                    continue
                sibling = _sibling_route(model, node, disp.function)
                if sibling_only and not sibling:
                    continue
                kinds = support_checks(model, test) | _unsettled(model, node, test, where, disp.function)
                if model_code and not sibling:
                    kinds &= UNSETTLED_BY_MODEL  # a model's own check states its contract, unless it refuses a route at hand
                if "device" in kinds and _device_settled(model, disp.function, registered):
                    kinds = kinds - {"device"}  # the dispatcher or every caller settled the device first
                if kinds and disp.before_last_site(node) and not _in_handler(model, node) \
                        and not _caller_chooses(model, node, disp.function) and not _settled_above(model, node):
                    found.append((where, stmt, kinds))
            if not found:
                continue
            # one finding per wrapper, at its first such check: the fix (a declared fallback) is one
            where, stmt, _ = found[0]
            kinds = set().union(*(k for _, _, k in found))
            what = " and ".join(KIND_TEXT[k] for k in sorted(kinds))
            more = f" ({len(found)} checks)" if len(found) > 1 else ""
            if kinds == {"available"}:
                self.report(where, MISSING_MESSAGE, stmt=stmt, more=more, kernel=disp.label)
            else:
                self.report(where, stmt=stmt, what=what, more=more, kernel=disp.label)


def _checks_in(function: cst.FunctionDef):
    """``(node, test, node to report, "assert"/"raise")`` for each assert and each ``if`` whose body raises."""
    for node in _walk(function.body):
        if type(node) is cst.Assert:
            yield node, node.test, node, "assert"
        elif type(node) is cst.If:
            raises = [s for line in statements(node.body) if type(line) is cst.SimpleStatementLine
                      for s in line.body if type(s) is cst.Raise]
            if raises:
                yield node, node.test, raises[0], "raise"


def _conjuncts(test: cst.CSTNode) -> list[cst.CSTNode]:
    """``a and b and c`` -> [a, b, c] (parentheses dropped); anything else -> [test]."""
    if type(test) is cst.BooleanOperation and type(test.operator) is cst.And:
        return _conjuncts(test.left) + _conjuncts(test.right)
    return [test.with_changes(lpar=(), rpar=()) if getattr(test, "lpar", None) else test]


def _settled_above(model, node) -> bool:
    """Whether the check cannot fail: what it requires (an assert's test, the negated test of an
    ``if not c: raise``) is already among the tests of an ``if`` whose body holds it (``if ENABLED
    and n < 4096: assert n < 4096``)."""
    test = node.test
    if type(node) is cst.If:
        if not (type(test) is cst.UnaryOperation and type(test.operator) is cst.Not):
            return False
        test = test.expression
    required = _conjuncts(test)
    child = node
    for anc in model.ancestors(node):
        if type(anc) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
            return False
        if type(anc) is cst.If and child is anc.body:
            known = _conjuncts(anc.test)
            if all(any(r.deep_equals(k) for k in known) for r in required):
                return True
        child = anc
    return False


def _sibling_route(model, node, function: cst.FunctionDef) -> bool:
    """Whether a check lies in one branch of an ``if`` on the input (its sizes, dtype, device:
    inside ``function``) whose other branch computes without refusing anything (it calls something
    and raises or asserts nothing): a GEMV kernel for a few rows beside the GEMM whose group size is
    refused. A branch on a mode or setting (``if scaling_mode == RCEIL:``) picks an algorithm, not a
    route for this input, and a test of the kernel's presence is the caller's way of choosing."""
    child = node
    for anc in model.ancestors(node):
        if anc is function:
            return False
        if type(anc) is cst.If and child is not anc.test and not availability_test(model, anc.test) \
                and _on_input(model, anc.test, function):
            other = anc.orelse if child is anc.body else anc.body
            if type(other) is cst.Else:
                other = other.body
            if other is not None and _computes(other):
                return True
        child = anc
    return False


def _on_input(model, test: cst.CSTNode, function: cst.FunctionDef) -> bool:
    """Whether a test reads an input property, directly or through a local the function binds
    from one (``rows = x.numel() // x.shape[-1]``, then ``if rows < 8:``)."""
    if mentioned_props(model, test):
        return True
    names = {n.value for n in _walk(test) if type(n) is cst.Name}
    return any(type(n) is cst.Assign and len(n.targets) == 1 and type(n.targets[0].target) is cst.Name
               and n.targets[0].target.value in names and mentioned_props(model, n.value)
               for n in _walk(function.body))


def _computes(block: cst.CSTNode) -> bool:
    """A branch that calls something and neither raises nor asserts."""
    nodes = list(_walk(block))
    return any(type(n) is cst.Call for n in nodes) and not any(type(n) in (cst.Raise, cst.Assert) for n in nodes)


def _unsettled(model, node, test, where, function: cst.FunctionDef) -> set[str]:
    """What no caller's dtype or shape settles: whether the kernel is installed (``assert HAVE_EXT``,
    ``if ext is None: raise``), and an optional input refused as not implemented at the entry point
    itself (``if mask is not None: raise NotImplementedError``): the path around the kernel could
    take it. An availability check inside a branch on a setting (``if self.use_cute_gate: assert
    gate_fn is not None``) states an invariant: the setting was chosen where the kernel loaded."""
    kinds = set()
    if availability_test(model, test) and not _under_setting(model, node, function):
        kinds.add("available")
    if type(where) is cst.Raise and function.name.value in ENTRY_METHODS and _not_implemented(model, where) \
            and _optional_input(test, function):
        kinds.add("feature")
    return kinds


ENTRY_METHODS = {"forward", "backward", "__call__"}


def _under_setting(model, node, function: cst.FunctionDef) -> bool:
    """Whether ``node`` lies in a branch of an ``if`` (inside ``function``) that tests something
    other than the kernel's availability."""
    for a in model.ancestors(node):
        if a is function:
            return False
        if type(a) is cst.If and a is not node and not availability_test(model, a.test):
            return True
    return False


def _not_implemented(model, node: cst.Raise) -> bool:
    exc = node.exc.func if type(node.exc) is cst.Call else node.exc
    return exc is not None and (model.dotted(exc) or "").split(".")[-1] == "NotImplementedError"


def _optional_input(test, function: cst.FunctionDef) -> bool:
    """``param is not None`` (or a bare ``param``) on a parameter that defaults to None."""
    optional = {p.name.value for p in (*function.params.params, *function.params.kwonly_params)
                if p.default is not None and type(p.default) is cst.Name and p.default.value == "None"}
    if type(test) is cst.Name:
        return test.value in optional
    return type(test) is cst.Comparison and len(test.comparisons) == 1 \
        and type(test.comparisons[0].operator) is cst.IsNot and type(test.left) is cst.Name \
        and test.left.value in optional and type(test.comparisons[0].comparator) is cst.Name \
        and test.comparisons[0].comparator.value == "None"


def _in_handler(model, node) -> bool:
    return any(type(a) is cst.ExceptHandler for a in model.ancestors(node))


def _caller_chooses(model, node, function: cst.FunctionDef) -> bool:
    """Whether the check lies in a branch of an ``if`` on one of the function's own parameters
    whose both branches check the input (``if allow_fp32: assert ... else: assert ...``): the
    caller picks the contract with that flag. A flag that picks another algorithm, with a check on
    one side only (``if sparse: raise ...``), still owes a fallback."""
    params = function.params
    names = {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}
    for a in model.ancestors(node):
        if a is function:
            return False
        if type(a) is cst.If:
            test = a.test.expression if type(a.test) is cst.UnaryOperation and type(a.test.operator) is cst.Not \
                else a.test
            if type(test) is cst.Name and test.value in names and a.orelse is not None \
                    and _checks(a.body) and _checks(a.orelse.body):
                return True  # the flag switches between two checked contracts
    return False


def _checks(block) -> bool:
    return any(type(n) in (cst.Assert, cst.Raise) for n in _walk(block))


REGISTRARS = {"impl", "register_kernel"}


def _device_settled(model, function: cst.FunctionDef, registered: set[str]) -> bool:
    """Whether the device is settled before ``function`` runs: it is registered for a dispatch key
    (the dispatcher routes by device), or it is a helper whose every same-module caller is so
    registered or tests the device itself before the call (an assert, a raise, a branch)."""
    if function.name.value in registered:
        return True
    calls = [c for c in model.calls if model.callee(c) is function]
    return bool(calls) and all(_settles_device(model, c, registered) for c in calls)


def _settles_device(model, call: cst.Call, registered: set[str]) -> bool:
    caller = model.enclosing_function(call)
    if caller is None:
        return False
    if caller.name.value in registered:
        return True
    for node in _walk(caller.body):
        if node is call:
            return False
        if type(node) in (cst.Assert, cst.If) and "device" in support_checks(model, node.test):
            return True
    return False


def _registered_impls(model) -> set[str]:
    """Names of the functions registered with torch's dispatcher for a dispatch key: passed to
    ``lib.impl(op, fn, key)`` or ``register_kernel(op, key, fn)``, or decorated with
    ``@torch.library.impl(op, key)`` / ``@op.register_kernel(key)``."""
    out: set[str] = set()
    for call in model.calls:
        last = (model.dotted(call.func) or "").split(".")[-1]
        if last in REGISTRARS and len(call.args) >= 3:
            out.update(a.value.value for a in call.args[1:] if type(a.value) is cst.Name
                       and a.value.value in model.functions)
    for name, defs in model.functions.items():
        for dec in (d.decorator for fn in defs for d in fn.decorators):
            if type(dec) is cst.Call and (model.dotted(dec.func) or "").split(".")[-1] in REGISTRARS and dec.args:
                out.add(name)
    return out
