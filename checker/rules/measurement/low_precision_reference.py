from __future__ import annotations

import re

import libcst as cst

from kcheck.rule import Rule
from kcheck.rules.measurement import REDUCTIONS, REFERENCE, Scope, is_compare, last, nodes_under

WIDE = {"float32", "float64", "float", "double"}
VIEWS = {"view", "reshape", "transpose", "permute", "contiguous", "flatten", "unsqueeze", "squeeze", "clone",
         "detach", "expand", "expand_as", "view_as", "t", "narrow", "unflatten"}
LOW_TEXT = re.compile(r"bfloat16|float16|\bhalf\b|bf16|fp16")
# Integer tensors a reference reduces exactly: counts, masks, ids.
COUNTS = re.compile(r"cnt|count|mask|^num_|_num$|idx|ids$|indices|hit|valid|flag|lens$|lengths$", re.IGNORECASE)


class LowPrecisionReference(Rule):
    """A reference implementation that computes in the kernel's low precision.

    ## What it does
    In modules that handle FP16/BF16 data, finds reference functions (named
    `ref_*`, `*_ref`, `reference*`, `naive_*`, `torch_*`, `*_native`, `forward_native`, ...)
    that reduce (`sum`, `mean`, `var`, `softmax`, `logsumexp`, `cumsum`, `norm`) a value they
    computed themselves (an elementwise intermediate already rounded to 16 bits, such as
    `x.pow(2)` or `logits / temperature`) on inputs that are visibly 16-bit (the reference casts to
    FP16/BF16 itself, or a call site in the module passes a tensor its caller created or cast with
    `dtype=torch.bfloat16`, `dtype=dtype`, `.half()`, `.to(dtype)`, or under
    `torch.set_default_dtype(dtype)`; a reference never called in
    the module, or fed only helper-built or default-FP32 tensors, is not judged; a call counts
    only where it reaches this function: `self.m(...)` reaches the method of its own class, and
    a name several functions or methods of the module define is no evidence for any of them; a
    cast back to a variable read off a tensor's own `.dtype` restores the input's type and says
    nothing about it) without ever upcasting (the name marks them as verification code wherever they live): no `.float()`, `.double()`, `.to(torch.float32)` or `dtype=torch.float32` in the
    function (a parameter default such as `work_dtype=torch.float32` counts), and not every call
    site in the module passes upcast inputs (`x.float()`, or a name the caller derived from one).
    Fakes handed to `monkeypatch.setattr` or `patch` are stand-ins, not references, and are
    left alone, as are Python's own `sum()` of a list and reductions of counts, masks, ids and lengths
    (`cnts.sum(0)`, `expert_mask.sum()`, `torch.tensor(seq_lens).cumsum(0)`): integer sums are exact.

    Also reported: a same-module reference called in test code with inputs cast down to 16 bits
    at the call (`torch_gemm(a.to(out_dtype), b.to(out_dtype), c, alpha, beta)`, `ref(x.half())`)
    when its result is compared and it does not upcast inside: the reference then rounds its
    inputs and its epilogue like the kernel does.

    PyTorch's own reductions accumulate in FP32 internally, so `torch.softmax(x)` of an input
    is left alone; the loss is in the rounded intermediates.

    ## Why is this bad?
    A reference in BF16 rounds at every step, so its error is as large as the kernel's: the
    comparison needs a tolerance wide enough to accept both, and at that width it accepts a
    wrong kernel too. The reference is the specification: compute it in FP32 (FP64 for very
    long sums) from the same inputs and cast once at the end.

    ## Example
    ```python
    def rms_norm_ref(x, w, eps):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
    ```

    ## Use instead
    ```python
    def rms_norm_ref(x, w, eps):
        xf = x.float()
        out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()
        return out.to(x.dtype)
    ```
    """

    CODE = "KC406"
    NAME = "low-precision-reference"
    MESSAGE = "{what}: compute the reference in float32 and cast once at the end"
    SEVERITY = "warning"
    PREVIEW = True  # below the bar on the test split: benchmarks/results/evaluation-test.md
    KNOWLEDGE = ("verification/upcast-reference",)
    VALID = [
        """
import torch
def rms_norm_ref(x, w, eps=1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w
def test_rms(dtype=torch.bfloat16):
    pass
""",
        """
import torch
def softmax_ref(x):
    return torch.softmax(x, dim=-1)
def test_softmax():
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    ref = softmax_ref(x.float())
""",
    ]
    INVALID = [
        """
import torch
def rms_norm_ref(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
def test_rms():
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    ref = rms_norm_ref(x, x)
""",
        """
import torch
def torch_softmax(logits):
    m = logits.max(dim=-1, keepdim=True).values
    e = (logits - m).exp()
    return e / e.sum(dim=-1, keepdim=True)
DTYPES = [torch.float16, torch.bfloat16]
def check(dtype):
    ref = torch_softmax(torch.randn(8, 64).to(dtype))
""",
    ]
    PREFILTER = (r"bfloat16|float16|\bhalf\b|bf16|fp16", r"sum|mean|var|std|softmax|logsumexp|norm|prod|\.to\(|half\(")
    NEEDS = ("reference reduction",)

    def leave_Module(self, original_node: cst.Module) -> None:
        if not LOW_TEXT.search(self.context.source):
            return
        for fn in (f for defs in self.model.functions.values() for f in defs):
            if fn.name.value.startswith("test") or not REFERENCE.search(fn.name.value) or self._upcasts(fn.body) or self._called_upcast(fn, original_node):
                continue
            if self._upcasts(fn.params) or self._stand_in(fn, original_node):
                continue  # work_dtype=torch.float32 by default, or a fake patched in by a test
            if not self._low_inputs(fn, original_node):
                continue  # no call site visibly hands it 16-bit tensors: its precision is not shown
            computed = self._computed_names(fn)
            for node in nodes_under(fn.body):
                if type(node) is cst.Call and _op(node) in REDUCTIONS and not self._loss(node):
                    if type(node.func) is cst.Name and node.func.value not in self.model.imports:
                        continue  # Python's sum() of a list, not a tensor reduction
                    if any(COUNTS.search(n.value) for n in nodes_under(_reduced(node) or node)
                           if type(n) is cst.Name):
                        continue  # counts, masks and ids: an integer reduction is exact
                    if self._computed(_reduced(node), computed):
                        self.report(node, what=f"reference {fn.name.value}() reduces with {_op(node)}() in the "
                                               "inputs' own precision")
                        break
        self._cast_at_call(original_node)

    def _cast_at_call(self, module: cst.Module) -> None:
        """A same-module reference called, in test code, with inputs cast down to 16 bits at the
        call (``torch_gemm(a.to(out_dtype), b.to(out_dtype), ...)``, ``ref(x.half())``) whose result
        is compared: the reference rounds like the kernel. A reference that upcasts inside is not
        reported, nor a cast to a dtype variable in a function that names no 16-bit dtype."""
        scope = Scope(self)
        for call in nodes_under(module, nested=True):
            if type(call) is not cst.Call or type(call.func) is not cst.Name or not scope.covers(call):
                continue
            fn = self.model.callee(call)
            if fn is None or fn.name.value.startswith("test") or not REFERENCE.search(fn.name.value):
                continue
            caller = self.model.enclosing_function(call)
            if caller is None or caller is fn or self._upcasts(fn.body) or self._upcasts(fn.params):
                continue
            if not any(self._cast_down(a.value, caller) for a in call.args):
                continue
            if self._compared(call, caller):
                self.report(call, what=f"reference {fn.name.value}() is given inputs cast down to 16 bits")

    def _cast_down(self, value: cst.CSTNode, caller: cst.FunctionDef) -> bool:
        """``x.half()``, ``x.bfloat16()``, ``x.to(torch.bfloat16)``, or ``x.to(out_dtype)`` in a
        function whose parameters or body name a 16-bit dtype."""
        if type(value) is not cst.Call or type(value.func) is not cst.Attribute:
            return False
        attr = value.func.attr.value
        if attr in ("half", "bfloat16"):
            return True
        if attr != "to" or not value.args:
            return False
        target = value.args[0].value
        text = self.model.dotted(target) or ""
        if LOW_TEXT.search(text):
            return True
        return type(target) is cst.Name and "dtype" in target.value.lower() and \
            target.value not in self._dtype_copies(caller) and bool(LOW_TEXT.search(_code(caller)))

    def _compared(self, call: cst.Call, caller: cst.FunctionDef) -> bool:
        """The call's result (directly, or through the name it is assigned to) is an argument of
        a comparison in the caller."""
        parent = self.model.parent(call)
        names = {t.target.value for t in parent.targets if type(t.target) is cst.Name} \
            if type(parent) is cst.Assign else set()
        for n in nodes_under(caller.body):
            if type(n) is cst.Call and is_compare(self.model, n):
                for a in n.args[:2]:
                    if any(x is call or (type(x) is cst.Name and x.value in names) for x in nodes_under(a.value)):
                        return True
        return False

    def _low_inputs(self, fn: cst.FunctionDef, module: cst.Module) -> bool:
        """The reference visibly computes on 16-bit tensors: it casts to FP16/BF16 itself, or a call
        site in the module passes an argument its caller created or cast as FP16/BF16
        (``dtype=torch.bfloat16``, ``dtype=dtype``, ``.half()``, ``.to(dtype)``)."""
        if self._low(fn.body):
            return True
        name = fn.name.value
        for site in nodes_under(module, nested=True):
            if not (type(site) is cst.Call and last(self.model.dotted(site.func)) == name):
                continue
            if not self._reaches(site, fn):
                continue  # another class's method of the same name
            caller = self.model.enclosing_function(site)
            low: set[str] = set()
            if caller is not None and any(
                    type(n) is cst.Call and last(self.model.dotted(n.func)) == "set_default_dtype"
                    and self._low(cst.Call(func=cst.Attribute(cst.Name("t"), cst.Name("to")), args=n.args))
                    for n in nodes_under(caller.body)):
                return True  # torch.set_default_dtype(dtype): every tensor the caller creates is 16-bit
            if caller is not None:
                assigns = [n for n in nodes_under(caller.body) if type(n) is cst.Assign]
                for _ in range(3):
                    for n in assigns:
                        if self._upcasts(n.value):
                            continue
                        if self._low(n.value) or any(type(x) is cst.Name and x.value in low
                                                     for x in nodes_under(n.value)):
                            low |= {t.target.value for t in n.targets if type(t.target) is cst.Name}
            for a in site.args:
                if self._upcasts(a.value):
                    continue
                if self._low(a.value) or (type(a.value) is cst.Name and a.value.value in low):
                    return True
        return False

    def _low(self, root: cst.CSTNode) -> bool:
        """A 16-bit cast or creation: ``.half()``, ``.bfloat16()``, ``.to(torch.bfloat16)``,
        ``dtype=torch.float16``, or ``dtype=dtype``/``.to(dtype)`` with a dtype variable. A variable
        the function assigns from a tensor's own ``.dtype`` (``orig = x.dtype ... .to(orig)``)
        restores the input's type and says nothing about what it is."""
        fn = root if type(root) is cst.FunctionDef else self.model.enclosing_function(root)
        own = self._dtype_copies(fn)
        for n in nodes_under(root):
            if type(n) is cst.Call and type(n.func) is cst.Attribute and n.func.attr.value in ("half", "bfloat16"):
                return True
            if type(n) is cst.Call:
                for a in n.args:
                    is_to = type(n.func) is cst.Attribute and n.func.attr.value == "to" and a.keyword is None
                    if not (is_to or (a.keyword is not None and a.keyword.value == "dtype")):
                        continue
                    text = self.model.dotted(a.value) or ""
                    if LOW_TEXT.search(text) or (type(a.value) is cst.Name and "dtype" in a.value.value.lower()
                                                 and a.value.value not in own):
                        return True
        return False

    def _dtype_copies(self, fn: cst.FunctionDef | None) -> set[str]:
        """The names ``fn`` assigns from a tensor's ``.dtype`` (once per function)."""
        if fn is None:
            return set()
        cache = self.__dict__.setdefault("_dtype_cache", {})
        if id(fn) not in cache:
            cache[id(fn)] = {t.target.value for n in nodes_under(fn.body) if type(n) is cst.Assign
                             and type(n.value) is cst.Attribute and n.value.attr.value == "dtype"
                             for t in n.targets if type(t.target) is cst.Name}
        return cache[id(fn)]

    def _reaches(self, site: cst.Call, fn: cst.FunctionDef) -> bool:
        """Whether a call of ``fn``'s name may run ``fn``: ``self.m(...)`` runs the method of the
        caller's own class (or its same-module bases), and any other call of a name that several
        functions or methods of the module define is ambiguous and counts for none of them."""
        func = site.func
        if type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value in ("self", "cls"):
            return self.model.callee(site) is fn
        return len(self.model.functions.get(fn.name.value, [])) <= 1 or self.model.callee(site) is fn

    def _stand_in(self, fn: cst.FunctionDef, module: cst.Module) -> bool:
        """The function is handed to ``monkeypatch.setattr``/``patch``: a fake that replaces code
        under test (it records calls, returns a stand-in value), not a numerical reference."""
        name = fn.name.value
        for n in nodes_under(module, nested=True):
            if type(n) is cst.Call and last(self.model.dotted(n.func)) in ("setattr", "patch", "object") and any(
                    type(a.value) is cst.Name and a.value.value == name for a in n.args):
                return True
        return False

    def _loss(self, call: cst.Call) -> bool:
        """A scalar made to call ``.backward()`` on (``(o * do).sum().backward()``), not the reference."""
        for anc in self.model.ancestors(call):
            if type(anc) is cst.Call and type(anc.func) is cst.Attribute and anc.func.attr.value == "backward":
                return True
            if isinstance(anc, cst.BaseSmallStatement):
                return False
        return False

    def _computed_names(self, fn: cst.FunctionDef) -> set[str]:
        """Names the function assigns from arithmetic or non-view calls: low-precision intermediates."""
        names: set[str] = set()
        for _ in range(2):
            for n in nodes_under(fn.body):
                if type(n) is cst.Assign and self._computed(n.value, names):
                    names |= {t.target.value for t in n.targets if type(t.target) is cst.Name}
        return names

    def _computed(self, expr: cst.CSTNode | None, computed: set[str]) -> bool:
        """Whether ``expr`` was rounded in low precision before (views of inputs were not)."""
        while True:
            if type(expr) is cst.Subscript:
                expr = expr.value
            elif type(expr) is cst.Call and type(expr.func) is cst.Attribute and expr.func.attr.value in VIEWS:
                expr = expr.func.value
            else:
                break
        if type(expr) is cst.Name:
            return expr.value in computed
        return type(expr) in (cst.BinaryOperation, cst.Call, cst.UnaryOperation)

    def _upcasts(self, root: cst.CSTNode) -> bool:
        for n in nodes_under(root):
            if type(n) is cst.Attribute and n.attr.value in ("float32", "float64", "double"):
                return True
            if type(n) is cst.Attribute and n.attr.value == "float" and type(n.value) is cst.Name \
                    and n.value.value == "torch":
                return True  # x.to(torch.float)
            if type(n) is cst.Call and type(n.func) is cst.Attribute and n.func.attr.value in ("float", "double"):
                return True
            if type(n) is cst.Call and type(n.func) is cst.Attribute and n.func.attr.value == "to" and any(
                    type(a.value) is cst.Name and a.value.value in WIDE for a in n.args):
                return True
        return False

    def _called_upcast(self, fn: cst.FunctionDef, module: cst.Module) -> bool:
        """Every call site in the module (there is at least one) passes upcast inputs."""
        name = fn.name.value
        sites = [n for n in nodes_under(module, nested=True)
                 if type(n) is cst.Call and last(self.model.dotted(n.func)) == name]
        return bool(sites) and all(any(self._upcast_value(a.value, n) for a in n.args) for n in sites)

    def _upcast_value(self, value: cst.CSTNode, site: cst.Call) -> bool:
        """``x.float()`` at the call, or a name the calling function assigned from an upcast."""
        if self._upcasts(value):
            return True
        caller = self.model.enclosing_function(site)
        if type(value) is cst.Name and caller is not None:
            # names the caller derives from an upcast, through a few assignments
            # (x_flat = x.float(); mix = x_flat @ w; logits = mix * a + b)
            wide: set[str] = set()
            assigns = [n for n in nodes_under(caller.body) if type(n) is cst.Assign]
            for _ in range(4):
                for n in assigns:
                    if self._upcasts(n.value) or any(type(x) is cst.Name and x.value in wide
                                                     for x in nodes_under(n.value)):
                        wide |= {t.target.value for t in n.targets if type(t.target) is cst.Name}
            return value.value in wide
        return False


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def _reduced(call: cst.Call) -> cst.CSTNode | None:
    """What a reduction reduces: the receiver of ``x.sum()``, the first argument of ``torch.sum(x)``."""
    func = call.func
    if type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value in ("torch", "F", "np"):
        return call.args[0].value if call.args else None
    if type(func) is cst.Attribute and not (type(func.value) is cst.Attribute):
        return func.value
    return call.args[0].value if call.args else None


def _op(call: cst.Call) -> str:
    func = call.func
    return func.attr.value if type(func) is cst.Attribute else (func.value if type(func) is cst.Name else "")


# -- the gate's ast counterparts of the helpers above ---------------------------------------------


