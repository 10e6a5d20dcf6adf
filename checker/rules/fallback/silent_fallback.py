from __future__ import annotations

import libcst as cst

from kcheck.model import walk
from kcheck.project import ONE_TIME
from kcheck.rule import Rule
from kcheck.rules.fallback import (
    BROAD_EXCEPTIONS, DISPATCH_TEXT, IMPORT_ERRORS, TEST_OR_BENCH, announces, caught, claims_only, computes, device_only, dispatchers, fallback_branches,
    sibling_statements, statements, warns,
)
from kcheck.rules.fallback.kernel_imports import bound_names, choices_on, ends, keeps_error, loads_kernel, version_shim
from kcheck.rules.fallback.switches import ignored_requests, switched_off

QUIET_IMPORT = ("{kernel} may be missing (`except {caught}`), and the module then takes its other path "
                "without a word: announce the fallback once, at import or at first use")


class SilentFallback(Rule):
    """A fallback that bypasses the kernel without saying so.

    ## What it does
    Reports a bypass of a specialised kernel that says nothing: an input guard whose other side
    computes the result another way without a warning, a kernel the caller or the configuration
    asked for switched off under a support test without a word, or a parameter asking for a kernel
    that the function never reads.

    In detail, it finds input guards on the compute path of a kernel claim that replaces a library path (the
    `forward_cuda` of a `CustomOp`-style class beside its `forward_native`, a function under a
    configured `kernel-paths` entry, an entry point a model reaches — the `forward` of an
    `nn.Module` or autograd `Function`, as KC301, or a module function patched in as a class's
    `forward` (`Qwen3MLP.forward = _mlp_forward_fused`) — and the same-module helpers they call) that
    launches a specialised kernel (written here, or a function imported from a kernel module or
    library such as `from .kernels.swiglu import run`) — an `if` on the dtype, device, shape, head size or layout, or on a
    `supported`/`can_use`-style check — where one side launches the kernel and the other computes
    the result some other way (a reference, a library op) without logging or warning, directly or
    in a same-module helper. At an entry point a device test is dispatch by device (a CPU tensor
    takes the CPU's path), not a fallback. Branches in low-level op wrappers outside such a claim (a CPU loop
    beside a CUDA kernel, a size threshold, a specialised kernel beside a general one) are
    dispatch, not a fallback from a claimed kernel, and are not checked. The announcers are
    `logger.warning_once` and other logger methods, `warnings.warn`, `print`, and the functions
    named in `fallback-announcers`.

    It also finds a kernel the caller or the configuration asked for that is switched off without
    a word: a setting read from the configuration (`persist = self.config.persist_layer_norm`),
    passed in (`use_fused_rope=True`) or taken from a flag saying the kernel is installed
    (`self.kernel_ok = _ext_available`) is set to False under a test of what the machine, the
    install or the input supports (a size outside the supported list, a size the kernel's tiles do
    not divide such as `in_features % 64 != 0`, `HAVE_APEX`, the device capability, a version),
    and neither that branch nor a later test of the setting says so. A
    test of the environment (`os.environ`) is the user's own switch. And a parameter that asks for a
    kernel by name and defaults to True (`use_flash_attn=True`) that its function never
    reads: the caller's choice is dropped without a word (stubs and abstract methods aside).

    And a kernel that may be missing when the module is imported: a `try` the module runs on
    import loads a kernel (an extension or kernel library, a loader, a project module whose import
    loads one) under an `except ImportError` that binds a flag or a stand-in and says nothing, and
    the module chooses on what it bound alone (`if causal_conv1d_fn is None:`, `self._fused if
    HAVE_EXT else self._torch`), on a path that runs per call or binds the function that will,
    with a side that computes another way, no choice refusing, and none saying so (one warning
    where any choice on it is made, in a constructor or an installer, announces the fallback). Broad handlers are
    KC303's; tests and benchmarks may skip what they cannot import.

    ## Why is this bad?
    A silent fallback turns "the kernel does not support this input" into "the kernel is slow",
    and nobody finds out which. Benchmarks and serving runs on that input measure the reference
    while crediting the kernel; a regression that widens the fallback's reach shows up only as lost
    throughput. A fallback that announces itself once per reason costs nothing on the hot path and
    makes the mismatch visible.

    ## Example
    ```python
    class RMSNorm(CustomOp):
        def forward_cuda(self, x):
            if x.dtype not in SUPPORTED_DTYPES:
                return self.forward_native(x)
            return torch.ops._C.rms_norm(x, self.weight, self.eps)
    ```

    ## Use instead
    ```python
    class RMSNorm(CustomOp):
        def forward_cuda(self, x):
            if x.dtype not in SUPPORTED_DTYPES:
                logger.warning_once("rms_norm: no kernel for %s, using the native path", x.dtype)
                return self.forward_native(x)
            return torch.ops._C.rms_norm(x, self.weight, self.eps)
    ```

    ## Options
    `fallback-announcers`: more functions (qualified or bare names) that count as announcing.
    """

    CODE = "KC304"
    NAME = "silent-fallback"
    MESSAGE = "the fallback taken when this guard sends input away from {kernel} logs and warns nothing"
    SEVERITY = "warning"
    PREVIEW = True  # below the bar on the test split: benchmarks/results/evaluation-test.md
    KNOWLEDGE = ("triton-cuda/declared-fallbacks",)
    VALID = [
        """
import torch
import warnings
class RMSNorm(CustomOp):
    def forward_native(self, x):
        return rms_norm_reference(x, self.w, self.eps)
    def forward_cuda(self, x):
        if x.dtype not in (torch.float16, torch.bfloat16):
            warnings.warn("rms_norm: no kernel for this dtype; using the reference")
            return rms_norm_reference(x, self.w, self.eps)
        return torch.ops._C.rms_norm(x, self.w, self.eps)
""",
        """
import torch
class RMSNorm(CustomOp):
    def forward_native(self, x):
        return rms_norm_reference(x, self.w, self.eps)
    def forward_cuda(self, x):
        if x.numel() == 0:
            return x
        return torch.ops._C.rms_norm(x, self.w, self.eps)
""",
        """
import torch
class ApplyBitmask(CustomOp):
    def forward_native(self, logits, mask):
        logits.masked_fill_(~mask, float("-inf"))
    def forward_cuda(self, logits, mask):
        if logits.device.type == "npu":
            torch.ops.npu.apply_token_bitmask(logits, mask)
        else:
            logits.masked_fill_(~mask, float("-inf"))
""",
        """
import torch
def rms_norm(x, w, eps):
    if x.dtype not in (torch.float16, torch.bfloat16):
        return rms_norm_reference(x, w, eps)
    return torch.ops._C.rms_norm(x, w, eps)
""",
    ]
    INVALID = [
        """
import torch
class RMSNorm(CustomOp):
    def forward_native(self, x):
        return rms_norm_reference(x, self.w, self.eps)
    def forward_cuda(self, x):
        if x.dtype not in (torch.float16, torch.bfloat16):
            return self.forward_native(x)
        return torch.ops._C.rms_norm(x, self.w, self.eps)
""",
        """
import torch
def _rotary(q, k, cos, sin, head_size):
    if head_size in (64, 128):
        torch.ops._C.rotary_embedding(q, k, cos, sin)
    else:
        q, k = rotary_reference(q, k, cos, sin)
    return q, k
class Rotary(CustomOp):
    def forward_native(self, q, k, cos, sin):
        return rotary_reference(q, k, cos, sin)
    def forward_cuda(self, q, k, cos, sin):
        return _rotary(q, k, cos, sin, self.head_size)
""",
    ]
    OPTIONS = ("fallback-announcers",)
    PREFILTER = (DISPATCH_TEXT + r"|False|use_", r"\bif\b|use_")
    NEEDS = ("claimed dispatcher", "setting switched off", "kernel request ignored",
             "kernel import under an import-error handler")

    def leave_Module(self, original_node: cst.Module) -> None:
        model = self.model
        said: set[int] = set()  # the tests reported below: a quiet import that leads to one is that finding
        for node, name in switched_off(model):
            said.add(id(node.test))
            self.report(node.test, kernel=f"the requested `{name}`")
        for param, name in ignored_requests(model):
            self.report(param, f"`{name}` asks for a kernel but the function never reads it: the caller's choice "
                               "is dropped without a word")
        for disp in dispatchers(model):
            for node, branch in fallback_branches(model, disp):
                if device_only(model, node.test) and not claims_only(model, disp.function):
                    continue  # at a module's forward, a CPU tensor's path beside the GPU kernel is dispatch
                if computes(model, branch) and not announces(model, branch):
                    said.add(id(node.test))
                    self.report(node.test, kernel=disp.label)
        for handler, what, choices in _quiet_imports(model):
            choice = next((c for c in choices if id(c.test) not in said), None)
            if choice is None:
                continue
            spelled = "ImportError" if handler.type is None else model.dotted(handler.type) or "ImportError"
            self.report(handler, QUIET_IMPORT, related=((choice, "the module chooses here, silently"),),
                        kernel=what[0].upper() + what[1:], caught=spelled)

def _quiet_imports(model):
    """(handler, what it loads, the silent choices) for each ``try`` the module runs on import
    that loads a kernel under an ``ImportError`` handler which neither warns nor keeps the error
    nor imports the same library under another path, and whose bound names the module chooses on
    with some choice saying nothing (``choices_on``)."""
    if TEST_OR_BENCH.search(model.path) or model.module is None:
        return  # a test or benchmark may skip what it cannot import
    for node in walk(model.module, into_scopes=False):
        if type(node) is not cst.Try or model.enclosing_function(node) is not None:
            continue
        what = None
        for handler in node.handlers:
            lasts = caught(model, handler)
            if not lasts & IMPORT_ERRORS or lasts & (BROAD_EXCEPTIONS | {"*"}):
                continue  # not an import's failure, or every failure (KC303's)
            body = statements(handler.body)
            if warns(model, body) or keeps_error(model, handler) or version_shim(model, node, handler) or any(
                    type(s) is cst.SimpleStatementLine and any(type(x) is cst.Raise for x in s.body) for s in body):
                continue
            what = what or loads_kernel(model, statements(node.body))
            if what is None:
                break
            bound = bound_names(model, node, handler)
            choices = choices_on(model, node, handler)
            if any(said for _, said in choices):
                continue  # the module says so once, where one choice on it is made (a constructor, an installer)
            silent = [choice for choice, said in choices
                      if not _refuses(model, choice) and _computes_aside(model, choice) and _per_call(model, choice)
                      and (type(choice) is cst.IfExp or _asks_availability(choice.test, bound))]
            if silent:
                yield handler, what, silent


def _computes_aside(model, choice) -> bool:
    """Whether a choice has a side that computes (:func:`computes`, or a ``@``): an ``if`` whose
    branches only import or export names, or bind a flag, takes no other path. An ``if`` that
    returns early has the statements after it as its other side."""
    def side_computes(nodes) -> bool:
        return bool(nodes) and (computes(model, nodes) or any(
            type(n) is cst.BinaryOperation and type(n.operator) is cst.MatrixMultiply for root in nodes for n in walk(root))
            and not any(type(n) is cst.Raise for root in nodes for n in walk(root)))

    if type(choice) is cst.IfExp:  # a side that calls, or picks a function to call (``self._torch``)
        return any(side_computes([side]) or _names_function(model, side) for side in (choice.body, choice.orelse))
    body = statements(choice.body)
    sides = [body] + ([statements(choice.orelse.body)] if type(choice.orelse) is cst.Else else [])
    siblings = sibling_statements(model, choice)
    if choice.orelse is None and choice in siblings and body and ends(body[-1]):
        sides.append(siblings[siblings.index(choice) + 1:][:3])
    return any(side_computes(side) for side in sides)


def _names_function(model, node) -> bool:
    """A module's function (``_torch_norm``) or a method of the class around it (``self._forward_torch``)."""
    if type(node) is cst.Name:
        return node.value in model.functions
    if type(node) is cst.Attribute and type(node.value) is cst.Name and node.value.value == "self":
        cls = next((a for a in model.ancestors(node) if type(a) is cst.ClassDef), None)
        return cls is not None and any(type(s) is cst.FunctionDef and s.name.value == node.attr.value for s in cls.body.body)
    return False


def _per_call(model, choice) -> bool:
    """Whether the choice picks the path a call takes: made in a function that runs per call, or,
    in set-up (``__init__``, ``setup_*``) or at module level, bound to the function that will run
    (``self.forward = self._fused if HAVE_EXT else self._torch``, ``rms_norm = _fused if ... else
    _torch``: :func:`_computes_aside` asks that such a choice name functions). A set-up step that patches or configures one way or another (a workspace, a version's
    API) is not a fallback of the compute."""
    fn = model.enclosing_function(choice)
    if fn is not None and not ONE_TIME.match(fn.name.value):
        return True
    for anc in model.ancestors(choice):
        if type(anc) in (cst.Assign, cst.AnnAssign):
            targets = [t.target for t in anc.targets] if type(anc) is cst.Assign else [anc.target]
            return any(type(x) is cst.Name and fn is None or type(x) is cst.Attribute for x in targets)
        if type(anc) in (cst.FunctionDef, cst.ClassDef, cst.If, cst.SimpleStatementLine) and anc is not choice:
            break
    if fn is None and type(choice) is cst.If:  # a module-level ``if HAVE_EXT: norm = _fused else: norm = _torch``
        return any(type(s) is cst.SimpleStatementLine and any(type(x) is cst.Assign for x in s.body)
                   for s in statements(choice.body))
    return False


def _asks_availability(test, bound: set[str]) -> bool:
    """Whether every clause of an ``if``'s test (joined by ``and``/``or``, or negated) asks about
    what the import bound (``causal_conv1d_fn is None``, ``not HAVE_TE``): a choice made on the
    kernel's presence alone, not one where the kernel's absence is one reason among others."""
    if type(test) is cst.BooleanOperation:
        return _asks_availability(test.left, bound) and _asks_availability(test.right, bound)
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        return _asks_availability(test.expression, bound)
    return any(type(n) is cst.Name and n.value in bound for n in walk(test))


def _refuses(model, choice) -> bool:
    """Whether a side of an ``if`` raises or asserts at its top (``if fused_bias_fc and FusedDense is
    None: raise ImportError(...)``): a choice that refuses loudly is no silent fallback."""
    if type(choice) is not cst.If:
        return False
    sides = [statements(choice.body)] + ([statements(choice.orelse.body)] if type(choice.orelse) is cst.Else else [])
    return any(type(s) is cst.SimpleStatementLine and any(type(x) in (cst.Raise, cst.Assert) for x in s.body)
               for side in sides for s in side)
