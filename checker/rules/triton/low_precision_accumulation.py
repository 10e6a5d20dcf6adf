from __future__ import annotations

import ast
import re
from collections.abc import Iterator

import libcst as cst

from kcheck.gate import ast_children, ast_identifiers
from kcheck.model import walk
from kcheck.rule import Rule
from kcheck.rules.triton import (
    TRITON_TEXT, arg, ast_arg, dotted, ast_nodes, is_tl_attr, kernels, names_outside_loads, nodes_under, tl_op,
    triton_gate_view,
)

LOW = ("float16", "bfloat16", "float8e4nv", "float8e5", "float8e4b15", "float8e4b8", "float8e5b16")
WIDE = ("float32", "float64")
# Pointers whose loads are integers (indices, counts, lengths), not activations.
INT_POINTER = re.compile(r"idx|ids|cnt|index|indices|offset|count|len|mask|pos|expert|table|slot|seq|parent",
                         re.IGNORECASE)
# Pointers to buffers kernels keep in fp32: split-K partials, scratch, running sums and maxima,
# denominators, normalisation statistics, scales. ``den`` only as a word of the name: ``hidden``
# is the activations.
F32_POINTER = re.compile(r"part|scratch|segm|acc|lse|sum|max|denom|(?:^|_)den(?:_|$)|mean|rstd|var|stat|scale|amax"
                         r"|fp32|f32|float32", re.IGNORECASE)
LOW_TEXT = re.compile(r"bfloat16|float16|\bhalf\b|bf16|fp16")
# A kernel whose docstring or comments say it reproduces 16-bit arithmetic on purpose (a reference
# for bf16 atomics, a bit-exact model of another kernel's rounding).
ON_PURPOSE = re.compile(
    r"bit[- ]?(?:exact|wise|comparable|identical|for[- ]bit)"
    r"|(?:match|mirror|reproduc|emulat|mimic)\w*\b[^.]{0,80}?\b(?:atomic|bf16|bfloat16|fp16|float16|half)",
    re.IGNORECASE)
# Parameters named for sizes and strides, not buffers (``max_seq_len``, ``state_stride``).
SIZE_NAME = re.compile(r"len|size|stride|num|dim|count|^n_|_n$", re.IGNORECASE)
# A comment at the end of a reduction's line that gives its type as FP32 (``# [N] fp32``): the
# buffer's type is set where the rule cannot see it (a cache allocated in another module).
FP32_COMMENT = re.compile(r"\b(?:fp32|f32|float32)\b", re.IGNORECASE)
# Host calls that allocate a tensor; ``dtype=`` says its element type.
TORCH_ALLOC = {"empty", "zeros", "ones", "full", "empty_strided", "randn", "rand", "tensor", "arange",
               "empty_like", "zeros_like", "ones_like", "full_like", "randn_like", "rand_like"}
WIDE_TORCH = {"torch.float32", "torch.float", "torch.float64", "torch.double"}
# Tensor methods that keep the receiver's element type.
SAME_DTYPE = {"view", "reshape", "contiguous", "flatten", "transpose", "permute", "squeeze", "unsqueeze",
              "expand", "narrow", "clone", "detach", "t", "zero_", "fill_", "view_as", "reshape_as", "to",
              "cuda", "as_strided", "select", "unflatten", "movedim"}
F32, LOADED, LOWP = "fp32", "loaded", "low"


class LowPrecisionAccumulation(Rule):
    """A reduction or dot product accumulated in the input's low precision.

    ## What it does
    Inside a `@triton.jit` function, finds three ways of accumulating in 16 bits or less:
    an accumulator created with `tl.zeros`/`tl.full` in `tl.float16`/`tl.bfloat16` (or in the
    input pointer's element type) and then added to; `tl.dot(..., out_dtype=tl.float16)`; and
    `tl.sum` over values loaded from memory and never cast to `tl.float32`, in a module that
    handles FP16/BF16 data. Loads that are integers (`other=-1`, pointers named for ids, counts,
    offsets) or from buffers kernels keep in FP32 (pointers named for partials, scratch, sums,
    maxima, statistics, scales, also through a local row pointer such as `row = state_ptr +
    slot * stride`, or a pointer for which every launch of the kernel in the module
    passes a tensor the host allocates in `torch.float32`, directly, through a helper's
    parameter or through an attribute its class sets up) do not count, and neither do values cast to 16 bits explicitly
    (`(x * x).to(tl.bfloat16)`: a kernel that reproduces a BF16 reference on purpose), nor a
    16-bit accumulator every term of which is cast to 16 bits first, nor a kernel whose
    docstring or comments say it models 16-bit rounding on purpose (bit-exact with, or mirroring,
    bf16 atomics). Values
    that meet an FP32 accumulator or running maximum (`tl.zeros(..., dtype=tl.float32)`) are
    FP32 by promotion, and a sum masked by an equality (`tl.sum(tl.where(offs == j, x, 0))`)
    selects one element and is exact. `tl.dot` without `out_dtype` accumulates in FP32 and is fine.

    ## Why is this bad?
    BF16 keeps 8 bits of mantissa: once a running sum is a few hundred times larger than the
    terms, the terms stop counting. `tl.sum` keeps the input's floating-point type, so a sum of
    squares over a 4,096-wide BF16 row (RMSNorm) or a softmax denominator loses digits, and FP16
    overflows past 65,504. The output still looks plausible and passes a loose tolerance.

    ## Example
    ```python
    x = tl.load(x_ptr + cols, mask=mask, other=0.0)
    var = tl.sum(x * x, axis=0) / n_cols
    ```

    ## Use instead
    ```python
    x = tl.load(x_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    var = tl.sum(x * x, axis=0) / n_cols
    ```
    """

    CODE = "KC503"
    NAME = "low-precision-accumulation"
    MESSAGE = "{what}: accumulate in tl.float32 and cast once at the store"
    SEVERITY = "warning"
    PREVIEW = True  # below the bar on the test split: benchmarks/results/evaluation-test.md
    KNOWLEDGE = ("triton-cuda/fp32-accumulation",)
    VALID = [
        """
import torch
import triton
import triton.language as tl
@triton.jit
def k(x_ptr, n_cols, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    var = tl.sum(x * x, axis=0) / n_cols
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    acc += tl.dot(x, x)
DTYPE = torch.bfloat16
""",
        """
import triton
import triton.language as tl
@triton.jit
def k(cnt_ptr, x_ptr, BLOCK: tl.constexpr):
    c = tl.load(cnt_ptr + tl.arange(0, BLOCK))
    total = tl.sum(c, axis=0)
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    s = tl.sum(x, axis=0, dtype=tl.float32)
# inputs are bfloat16
""",
    ]
    INVALID = [
        """
import triton
import triton.language as tl
@triton.jit
def k(x_ptr, n_cols, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + cols, mask=cols < n_cols, other=0.0)
    var = tl.sum(x * x, axis=0) / n_cols
# bf16 activations
""",
        """
import triton
import triton.language as tl
@triton.jit
def k(a_ptr, b_ptr, K, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK, BLOCK), dtype=a_ptr.dtype.element_ty)
    for k in range(0, K, BLOCK):
        a = tl.load(a_ptr)
        b = tl.load(b_ptr)
        acc += tl.dot(a, b)
""",
        """
import triton
import triton.language as tl
@triton.jit
def k(a, b):
    c = tl.dot(a, b, out_dtype=tl.float16)
""",
    ]
    PREFILTER = (TRITON_TEXT, r"zeros|full|dot|sum")
    _wide: set[str] = set()  # the current kernel's parameters launched with float32 buffers

    @classmethod
    def gate(cls, summary, config) -> bool:
        """A kernel with one of the three things a report needs: a name assigned a
        ``tl.zeros``/``tl.full`` whose dtype is 16-bit or a pointer's element type (``_low_dtype``)
        and then accumulated into (``+=``, ``acc = acc + ...``, ``tl.dot(a, b, acc)``); a
        ``tl.dot`` with a 16-bit ``out_dtype``; or a ``tl.sum`` without ``dtype`` whose values may
        be 16-bit loads (``_GateKinds``) in a file whose text names FP16 or BF16 (``LOW_TEXT``), as
        the rule wants for sums."""
        view = triton_gate_view(summary)
        if view is None:
            return True
        low_text = summary.source is None or bool(LOW_TEXT.search(summary.source))
        for k in view.kernels:
            kinds = None
            low = set()  # names assigned a 16-bit zeros/full
            for name, values in k.assigned().items():
                for value in values:
                    op = view.tl_op(value) if type(value) is ast.Call else None
                    if op in ("zeros", "full"):
                        dtype = ast_arg(value, 1 if op == "zeros" else 2, "dtype")
                        if dtype is not None and (view.is_tl_attr(dtype, *LOW) or _gate_element_type(dtype)):
                            low.add(name)
            if low & k.augmented() or any(type(v) is ast.BinOp and name in (_name(v.left), _name(v.right))
                                          for name in low for v in k.assigned()[name]):
                return True  # acc += x, acc = acc + x: _updates
            for call, op in k.tl_calls("dot", "sum"):
                if op == "dot":
                    out, acc = ast_arg(call, 99, "out_dtype"), ast_arg(call, 2, "acc")
                    if (out is not None and view.is_tl_attr(out, *LOW)) or (type(acc) is ast.Name and acc.id in low):
                        return True
                elif low_text:
                    values = ast_arg(call, 0, "input")
                    if ast_arg(call, 99, "dtype") is None and values is not None:
                        kinds = kinds or _GateKinds(view, k)
                        if LOADED in kinds.of(values):
                            return True
        return False

    def leave_Module(self, original_node: cst.Module) -> None:
        low_text = bool(LOW_TEXT.search(self.context.source))
        self._assigns: dict[int, dict[str, list]] = {}  # per host function: name -> values assigned
        on_purpose = bool(ON_PURPOSE.search(self.context.source))  # the file says so somewhere: which kernel?
        for k in kernels(self.model):
            if on_purpose and ON_PURPOSE.search(cst.Module([]).code_for_node(k.fn)):
                continue  # says it models 16-bit rounding (bf16 atomics, a bit-exact twin) on purpose
            self._wide = self._wide_params(k)
            self._accumulators(k)
            self._dots(k)
            if low_text:
                self._sums(k)

    def _low_dtype(self, node) -> bool:
        """``tl.float16``/``tl.bfloat16``/fp8, or the element type of a pointer argument."""
        if node is None:
            return False
        if is_tl_attr(self.model, node, *LOW):
            return True
        text = self.model.dotted(node) or ""
        if INT_POINTER.search(text.split(".")[0]):
            return False  # typed like ids or counts: an integer accumulator
        if text.split(".")[0] in self._wide:
            return False  # the element type of a buffer every launch allocates in float32
        return text.endswith(".dtype.element_ty") or text.endswith(".dtype")

    def _accumulators(self, k) -> None:
        created: dict[str, cst.Call] = {}
        for name, value, stmt in k.assigns:
            if type(value) is cst.Call and tl_op(self.model, value) in ("zeros", "full"):
                index = 1 if tl_op(self.model, value) == "zeros" else 2
                if self._low_dtype(arg(value, index, "dtype")):
                    created[name] = value
        updates: dict[str, list] = {}
        for name, value, stmt in k.assigns:
            if name in created and self._updates(name, value, stmt, k):
                updates.setdefault(name, []).append((self._addend(name, value, stmt, k), stmt))
        selectors = _selector_names(k)
        for name, addends in updates.items():
            if all(self._cast_low(a, k) for a, _ in addends):
                continue  # every term is cast to 16 bits first: the kernel models 16-bit adds on purpose
            if all(self._selects_once(a, stmt, selectors) for a, stmt in addends):
                continue  # each element gets one nonzero term over the loop: the adds are exact
            self.report(created.pop(name), what=f"{name} is created in a 16-bit type and accumulated into")
        for call in k.calls(self.model, "dot"):
            acc = arg(call, 2, "acc")
            if type(acc) is cst.Name and acc.value in created:
                self.report(created.pop(acc.value), what=f"{acc.value} is a 16-bit tl.dot accumulator")

    def _updates(self, name, value, stmt, k) -> bool:
        if id(stmt) in k.augmented:
            return True
        return type(value) is cst.BinaryOperation and any(
            type(side) is cst.Name and side.value == name for side in (value.left, value.right))

    def _addend(self, name, value, stmt, k):
        """What an update adds to the accumulator: ``v`` of ``acc += v`` or ``acc = acc + v``."""
        if id(stmt) in k.augmented or type(value) is not cst.BinaryOperation:
            return value
        left = type(value.left) is cst.Name and value.left.value == name
        return value.right if left else value.left

    def _buffers(self, pointer, k) -> set[str]:
        """The kernel's runtime parameters a pointer expression is built from, through the local
        names it uses (``row = state_ptr + slot * stride``) but not through loads (an index
        loaded from a block table is not the buffer)."""
        found: set[str] = set()
        seen: set[str] = set()
        todo = [pointer]
        while todo:
            for name in names_outside_loads(self.model, todo.pop()):
                if name in k.params:
                    found.add(name)
                elif k.values(name) and name not in seen and len(seen) < 32:
                    seen.add(name)
                    todo.extend(k.values(name))
        return found - k.constexprs

    def _selects_once(self, addend, stmt, selectors: set[str]) -> bool:
        """The term added in a loop is masked by an equality that the loop variable picks
        (``tl.load(p, mask=axis_masks[axis])`` with ``h_mask = (pairs % 3) == 1``,
        ``tl.where(expert == e, x, 0)``): each element receives one nonzero term in all."""
        loop = next((a for a in self.model.ancestors(stmt) if type(a) is cst.For), None)
        if loop is None or not self._selects(addend, selectors):
            return False
        variables = {n.value for n in nodes_under(loop.target) if type(n) is cst.Name}
        return any(type(n) is cst.Name and n.value in variables for n in nodes_under(addend))

    def _cast_low(self, expr, k, depth: int = 3) -> bool:
        """``x.to(tl.bfloat16)``/``tl.cast(x, tl.float16)``, directly or through a name every
        assignment of which is one."""
        if type(expr) is cst.Call:
            func = expr.func
            if type(func) is cst.Attribute and func.attr.value == "to" and expr.args:
                return is_tl_attr(self.model, expr.args[0].value, *LOW)
            if tl_op(self.model, expr) == "cast":
                target = arg(expr, 1, "dtype")
                return target is not None and is_tl_attr(self.model, target, *LOW)
            return False
        if type(expr) is cst.Name and depth > 0:
            values = k.values(expr.value)
            return bool(values) and all(self._cast_low(v, k, depth - 1) for v in values)
        return False

    # -- what the host passes -------------------------------------------------------------------

    def _wide_params(self, k) -> set[str]:
        """The kernel's parameters for which every launch of it in this module (one at least)
        passes a tensor the host allocates in float32 or float64 (``torch.empty(...,
        dtype=torch.float32)``, ``.float()``, ``torch.empty_like`` of such a tensor), directly or
        through a parameter of the launching function that its callers here fill that way: split-K
        partials, fp32 scratch."""
        model = self.model
        order = list(k.params)
        seen: dict[str, list[bool]] = {}
        for site in model.launch_sites.values():
            func = site.call.func
            if not (type(func) is cst.Subscript and model.dotted(func.value) == k.name):
                continue
            host = model.enclosing_function(site.call)
            passed, positional = {}, []
            for a in site.call.args:
                if a.star:
                    break  # ``*x.stride()``: the positions after it are unknown
                if a.keyword is None:
                    positional.append(a.value)
            passed.update(zip(order, positional))
            passed.update({a.keyword.value: a.value for a in site.call.args if a.keyword is not None})
            for name in order:
                value = passed.get(name)
                seen.setdefault(name, []).append(value is not None and self._host_wide(value, host, 2, set()))
        return {name for name, wide in seen.items() if wide and all(wide)}

    def _host_wide(self, expr, fn, depth: int, visiting: set) -> bool:
        model = self.model
        if type(expr) is cst.Subscript:
            return self._host_wide(expr.value, fn, depth, visiting)
        if type(expr) is cst.Call:
            name = model.call_name(expr) or ""
            func = expr.func
            if name.startswith("torch.") and name[len("torch."):] in TORCH_ALLOC:
                dtype = arg(expr, 99, "dtype")
                if dtype is not None:
                    return model.qualname(dtype) in WIDE_TORCH
                source = arg(expr, 0, "input") if name.endswith("_like") else None
                return source is not None and self._host_wide(source, fn, depth, visiting)
            if type(func) is not cst.Attribute:
                return False
            method = func.attr.value
            if method in ("float", "double"):
                return True
            if method in ("new_empty", "new_zeros", "new_ones", "new_full"):
                dtype = arg(expr, 99, "dtype")
                return model.qualname(dtype) in WIDE_TORCH if dtype is not None else \
                    self._host_wide(func.value, fn, depth, visiting)
            dtypes = [a.value for a in expr.args if (model.qualname(a.value) or "").startswith("torch.")
                      and (a.keyword is None or a.keyword.value == "dtype")
                      and (model.qualname(a.value) or "").split(".")[-1] in _TORCH_DTYPES]
            if method in ("to", "view", "type") and dtypes:
                return model.qualname(dtypes[-1]) in WIDE_TORCH
            if method == "to" and any((model.dotted(a.value) or "").endswith("dtype") for a in expr.args):
                return False  # x.to(y.dtype): whatever y holds
            if method in SAME_DTYPE:
                return self._host_wide(func.value, fn, depth, visiting)
            return False
        if type(expr) is cst.Attribute and type(expr.value) is cst.Name and expr.value.value == "self" \
                and fn is not None:
            owner = next((a for a in model.ancestors(fn) if type(a) is cst.ClassDef), None)
            key = (id(owner), expr.attr.value)
            if owner is None or key in visiting:
                return owner is not None
            visiting = visiting | {key}
            sources = [(v, model.enclosing_function(v)) for v in _self_assigns(owner, expr.attr.value)]
            return bool(sources) and all(self._host_wide(v, f, depth, visiting) for v, f in sources)
        if type(expr) is cst.Name and fn is not None:
            key = (id(fn), expr.value)
            if key in visiting:
                return True  # ``x = x.view(...)``: decided by x's other sources
            visiting = visiting | {key}
            assigns = self._assigns.get(id(fn))
            if assigns is None:
                assigns = self._assigns[id(fn)] = {}
                for target, v in _host_assigns(fn):
                    assigns.setdefault(target, []).append(v)
            sources = assigns.get(expr.value, [])
            params = _param_names(fn)
            if expr.value in params:
                if depth <= 0:
                    return False
                index = params.index(expr.value)
                callers = model.callers(fn)
                if not callers:
                    return False
                for call in callers:
                    shift = 1 if params and params[0] in ("self", "cls") and type(call.func) is cst.Attribute else 0
                    value = arg(call, index - shift, expr.value)
                    if value is None or not self._host_wide(value, model.enclosing_function(call), depth - 1, visiting):
                        return False
            if not all(self._host_wide(v, fn, depth, visiting) for v in sources):
                return False
            return bool(sources) or expr.value in params
        return False

    def _dots(self, k) -> None:
        for call in k.calls(self.model, "dot"):
            out = arg(call, 99, "out_dtype")
            if out is not None and is_tl_attr(self.model, out, *LOW):
                self.report(call, what="tl.dot(..., out_dtype=<16-bit type>) accumulates the product in 16 bits")

    def _selects(self, values, selectors: set[str]) -> bool:
        """The summed values are masked by an equality (``tl.where(offs == j, x, 0)``,
        ``x * (cols == idx)``): the sum picks one element per row and adds nothing."""
        return _equality(values) or any(type(n) is cst.Name and n.value in selectors for n in nodes_under(values))

    def _sums(self, k) -> None:
        model = self.model
        kinds: dict[str, str | None] = {}  # what each name assigned so far holds (see _kind)
        carried = _float_carried(k.fn)
        selectors: set[str] = set()  # names holding an equality mask (cols == idx)

        for node in nodes_under(k.fn.body):
            if type(node) is cst.SimpleStatementLine:
                comment = node.trailing_whitespace.comment
                # ``s = tl.sum(kv * w, axis=0)  # [BLOCK] fp32``: the line's own type annotation
                stated = comment is not None and bool(FP32_COMMENT.search(comment.value))
                for sub in nodes_under(node) if not stated else ():
                    if type(sub) is cst.Call and tl_op(model, sub) == "sum" and arg(sub, 99, "dtype") is None:
                        values = arg(sub, 0, "input")
                        if values is not None and self._selects(values, selectors):
                            continue  # sum(where(idx == j, x, 0)): picks one element, exact
                        # LOADED, not LOWP: an explicit 16-bit cast is on purpose
                        if values is not None and self._kind(values, k, kinds, carried) == LOADED:
                            self.report(sub, what="tl.sum over 16-bit values loaded from memory keeps their precision")
                for stmt in node.body:
                    if type(stmt) is cst.Assign and len(stmt.targets) == 1 and type(stmt.targets[0].target) is cst.Name:
                        kinds[stmt.targets[0].target.value] = self._kind(stmt.value, k, kinds, carried)
                        if _equality(stmt.value):
                            selectors.add(stmt.targets[0].target.value)

    def _kind(self, expr, k, kinds: dict[str, str | None], carried: set[str]) -> str | None:
        """The precision ``expr`` holds in kernel ``k``: F32, LOWP, LOADED (16-bit values loaded from
        memory) or None (unknown), given the kinds of the names assigned before it."""
        model = self.model
        if type(expr) is cst.Name:
            got = kinds.get(expr.value)
            return F32 if got is None and expr.value in carried else got
        if type(expr) is cst.Call:
            func = expr.func
            if type(func) is cst.Attribute and func.attr.value == "to" and expr.args:
                target = expr.args[0].value
                if is_tl_attr(model, target, *WIDE):
                    return F32
                return LOWP if is_tl_attr(model, target, *LOW) else None
            op = tl_op(model, expr)
            if op == "load":
                pointer = arg(expr, 0, "pointer")
                bases = {n.value for n in nodes_under(pointer) if type(n) is cst.Name} & set(k.params) \
                    if pointer is not None else set()
                other = arg(expr, 2, "other")
                if type(other) is cst.UnaryOperation and type(other.expression) is cst.Integer:
                    return None  # other=-1: a sentinel of an integer load
                named = {n.value for n in nodes_under(pointer) if type(n) is cst.Name} if pointer else set()
                if any(INT_POINTER.search(n) for n in named - bases if n.endswith(("_ptr", "_base", "_ptrs"))):
                    return None  # a local pointer named for ids or counts
                if any(F32_POINTER.search(n) for n in named):
                    return F32  # partial sums, maxima, statistics and scales are kept in fp32
                buffers = self._buffers(pointer, k) if pointer is not None else set()
                if buffers & self._wide:
                    return F32  # every launch passes a buffer allocated in float32
                if any(F32_POINTER.search(n) and not SIZE_NAME.search(n) for n in buffers - bases):
                    return F32  # row = state_ptr + slot * stride; tl.load(row + d): the buffer is named
                return None if any(INT_POINTER.search(n) for n in bases) else LOADED
            if op == "cast":
                if len(expr.args) < 2:
                    return None
                as_to = cst.Call(cst.Attribute(expr.args[0].value, cst.Name("to")), [expr.args[1]])  # x.to(dtype)
                return self._kind(as_to, k, kinds, carried)
            if op in ("zeros", "full"):  # an fp32 accumulator or running max promotes what meets it
                dtype = arg(expr, 1 if op == "zeros" else 2, "dtype")
                return F32 if dtype is not None and is_tl_attr(model, dtype, *WIDE) else None
            if op in ("dot", "sum"):
                return F32 if op == "dot" else None
            if op in ("max", "min"):
                return self._combine([a.value for a in expr.args[:1]], k, kinds, carried)
            if op in ("exp", "exp2", "log", "sqrt", "rsqrt", "abs", "maximum", "minimum", "where", "sigmoid"):
                return self._combine([a.value for a in expr.args], k, kinds, carried)
            return None
        if type(expr) is cst.BinaryOperation:
            if type(expr.operator) is cst.FloorDivide:
                return None  # Triton's // takes integers only: counts, group numbers
            return self._combine((expr.left, expr.right), k, kinds, carried)
        if type(expr) is cst.UnaryOperation:
            return self._kind(expr.expression, k, kinds, carried)
        if type(expr) is cst.Subscript:
            return self._kind(expr.value, k, kinds, carried)
        return None

    def _combine(self, parts, k, kinds: dict[str, str | None], carried: set[str]) -> str | None:
        found = [self._kind(p, k, kinds, carried) for p in parts]
        if F32 in found:
            return F32
        return LOWP if LOWP in found else (LOADED if LOADED in found else None)


def _float_carried(fn: cst.FunctionDef) -> set[str]:
    """Names a kernel binds to a Python float (``m = -float("inf")``, ``acc = 0.0``) and assigns
    again inside a loop: Triton makes such a loop-carried value an fp32 tensor, so what meets it in
    the loop (``tl.maximum(x, m)``, ``x - m``) is promoted to fp32."""
    floats: set[str] = set()
    in_loops: set[str] = set()
    for node in nodes_under(fn.body):
        if type(node) is cst.Assign and len(node.targets) == 1 and type(node.targets[0].target) is cst.Name \
                and _float_literal(node.value):
            floats.add(node.targets[0].target.value)
        elif type(node) in (cst.For, cst.While):
            for sub in nodes_under(node.body):
                if type(sub) is cst.Assign:
                    in_loops.update(t.target.value for t in sub.targets if type(t.target) is cst.Name)
                elif type(sub) is cst.AugAssign and type(sub.target) is cst.Name:
                    in_loops.add(sub.target.value)
    return floats & in_loops


def _float_literal(expr) -> bool:
    """``0.0``, ``-1e30``, ``float("inf")``, ``-float("inf")``."""
    if type(expr) is cst.UnaryOperation:
        expr = expr.expression
    if type(expr) is cst.Float:
        return True
    return type(expr) is cst.Call and type(expr.func) is cst.Name and expr.func.value == "float"


_TORCH_DTYPES = {"float32", "float", "float64", "double", "float16", "half", "bfloat16", "int8", "uint8", "int16",
                 "int32", "int64", "int", "long", "bool", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz"}


def _host_assigns(fn: cst.FunctionDef) -> list[tuple[str, cst.BaseExpression]]:
    """(name, value) for every ``name = value`` in a host function's own body."""
    out = []
    for node in walk(fn.body, into_scopes=False):
        if type(node) is cst.Assign:
            out += [(t.target.value, node.value) for t in node.targets if type(t.target) is cst.Name]
        elif type(node) is cst.AnnAssign and type(node.target) is cst.Name and node.value is not None:
            out.append((node.target.value, node.value))
    return out


def _selector_names(k) -> set[str]:
    """Names the kernel assigns from an equality mask (``h = (pairs % 3) == 1``), or from such
    names (``t = ~(h | w)``, ``masks = (t, h, w)``)."""
    found: set[str] = set()
    for _ in range(3):
        for name, value, _stmt in k.assigns:
            if _equality(value) or any(type(n) is cst.Name and n.value in found for n in nodes_under(value)):
                found.add(name)
    return found


def _self_assigns(owner: cst.ClassDef, attr: str) -> list[cst.BaseExpression]:
    """The values every method of a class assigns to ``self.<attr>``."""
    out = []
    for node in walk(owner.body):
        if type(node) in (cst.Assign, cst.AnnAssign) and node.value is not None:
            targets = [t.target for t in node.targets] if type(node) is cst.Assign else [node.target]
            if any(type(t) is cst.Attribute and type(t.value) is cst.Name and t.value.value == "self"
                   and t.attr.value == attr for t in targets):
                out.append(node.value)
    return out


def _param_names(fn: cst.FunctionDef) -> list[str]:
    ps = fn.params
    return [p.name.value for p in [*ps.posonly_params, *ps.params, *ps.kwonly_params]]


def _equality(expr) -> bool:
    return any(type(n) is cst.Comparison and any(type(t.operator) is cst.Equal for t in n.comparisons)
               for n in nodes_under(expr))


def _gate_element_type(dtype) -> bool:
    """``_low_dtype``'s second case over ``ast``: ``x_ptr.dtype.element_ty`` or ``x.dtype``, x not
    named like ids or counts."""
    text = dotted(dtype) or ""
    return not INT_POINTER.search(text.split(".")[0]) and text.endswith((".dtype.element_ty", ".dtype"))


def _name(node) -> str | None:
    return node.id if type(node) is ast.Name else None


class _GateKinds:
    """``_sums``'s ``kind`` over ``ast``, as the set of kinds an expression may have: a name may
    hold the kind of any value the kernel assigns it, or None (read before it is assigned), so
    every kind the rule's source-order walk gives is in the set."""

    def __init__(self, view, k) -> None:
        self.view, self.kernel, self.params = view, k, set(k.params)
        a = k.node.args
        self.plain = {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs) if p.annotation is None}
        self.values: dict[str, list] = {}  # single-target assignments, as the rule records them
        for node in k.statements(ast.Assign):
            if len(node.targets) == 1 and type(node.targets[0]) is ast.Name:
                self.values.setdefault(node.targets[0].id, []).append(node.value)
        self.kinds: dict[str, frozenset] = {}

    def of(self, expr) -> frozenset:
        names, todo = set(), [expr]
        while todo:  # the assigned names the expression depends on, through their values
            for node in ast_nodes([todo.pop()]):
                if type(node) is ast.Name and node.id in self.values and node.id not in names:
                    names.add(node.id)
                    if node.id not in self.kinds:
                        todo.extend(self.values[node.id])
        names -= self.kinds.keys()  # those already solved, with all they depend on
        for name in names:
            self.kinds[name] = _NONE
        changed = bool(names)
        while changed:
            changed = False
            for name in names:
                new = self.kinds[name].union(*(self._kind(v) for v in self.values[name]))
                if new != self.kinds[name]:
                    self.kinds[name], changed = new, True
        return self._kind(expr)

    def _kind(self, expr) -> frozenset:
        view = self.view
        kind = type(expr)
        if kind is ast.Name:
            return self.kinds.get(expr.id, _NONE)
        if kind is ast.BinOp:
            return _combine([self._kind(expr.left), self._kind(expr.right)])
        if kind is ast.UnaryOp:
            return self._kind(expr.operand)
        if kind is ast.Subscript:
            return self._kind(expr.value)
        if kind is not ast.Call:
            return _NONE
        args = _source_args(expr)
        if isinstance(expr.func, ast.Attribute) and expr.func.attr == "to" and args:
            return _cast(view, args[0])
        op = view.tl_op(expr)
        if op == "load":
            return frozenset({self._load(expr)})
        if op == "cast":
            return _cast(view, args[1]) if len(args) >= 2 else _NONE
        if op in ("zeros", "full"):
            dtype = ast_arg(expr, 1 if op == "zeros" else 2, "dtype")
            return frozenset({F32}) if dtype is not None and view.is_tl_attr(dtype, *WIDE) else _NONE
        if op == "dot":
            return frozenset({F32})
        if op in ("max", "min"):
            return _combine([self._kind(a) for a in args[:1]])
        if op in ("exp", "exp2", "log", "sqrt", "rsqrt", "abs", "maximum", "minimum", "where", "sigmoid"):
            return _combine([self._kind(a) for a in args])
        return _NONE

    def _load(self, call):
        """The one kind of a ``tl.load``, as the rule decides it from the pointer's names."""
        pointer = ast_arg(call, 0, "pointer")
        named = {n for node in (ast_nodes([pointer], into_scopes=False) if pointer is not None else ())
                 for n in ast_identifiers(node)}
        bases = named & self.params
        other = ast_arg(call, 2, "other")
        if type(other) is ast.UnaryOp and type(other.operand) is ast.Constant and type(other.operand.value) is int:
            return None  # other=-1: a sentinel of an integer load
        if any(INT_POINTER.search(n) for n in named - bases if n.endswith(("_ptr", "_base", "_ptrs"))):
            return None
        if any(F32_POINTER.search(n) for n in named):
            return F32
        if any(F32_POINTER.search(n) and not SIZE_NAME.search(n) for n in self._buffers(pointer) - bases):
            return F32  # row = state_ptr + slot * stride; tl.load(row + d): the buffer is named
        return None if any(INT_POINTER.search(n) for n in bases) else LOADED

    def _buffers(self, pointer) -> set[str]:
        """The rule's ``_buffers``: the runtime parameters a pointer is built from through the
        kernel's assignments, not through loads. Only parameters with no annotation count (the
        rule leaves out every ``tl.constexpr``, string annotations included), and nothing when the
        walk would pass the rule's limit of 32 names, where the rule may stop and find fewer."""
        if pointer is None:
            return set()
        assigned = self.kernel.assigned()
        found: set[str] = set()
        seen: set[str] = set()
        todo = [pointer]
        while todo:
            for name in _names_outside_loads(self.view, todo.pop()):
                if name in self.params:
                    found.add(name)
                elif assigned.get(name) and name not in seen:
                    if len(seen) >= 32:
                        return set()
                    seen.add(name)
                    todo.extend(assigned[name])
        return found & self.plain


def _names_outside_loads(view, expr) -> Iterator[str]:
    """``names_outside_loads`` over ``ast``: the identifiers libcst holds in ``Name`` nodes (names,
    attributes, keywords) outside ``tl.load`` calls."""
    stack = [expr]
    while stack:
        node = stack.pop()
        if type(node) is ast.Call and view.tl_op(node) == "load":
            continue
        yield from ast_identifiers(node)
        stack.extend(ast_children(node))


_NONE = frozenset({None})


def _source_args(call) -> list:
    """The values of a call's arguments in source order, as libcst's ``Call.args`` holds them."""
    args = [(a.lineno, a.col_offset, a.value if type(a) is ast.Starred else a) for a in call.args]
    args += [(kw.lineno, kw.col_offset, kw.value) for kw in call.keywords]
    return [value for _, _, value in sorted(args, key=lambda t: t[:2])]


def _cast(view, target) -> frozenset:
    if view.is_tl_attr(target, *WIDE):
        return frozenset({F32})
    return frozenset({LOWP}) if view.is_tl_attr(target, *LOW) else _NONE


def _combine(parts: list[frozenset]) -> frozenset:
    """``combine`` over sets: each outcome the rule's ``combine`` gives for some choice of one
    kind per part."""
    out = set()
    if any(F32 in p for p in parts):
        out.add(F32)
    if all(p - {F32} for p in parts):  # every part can be other than F32
        if any(LOWP in p for p in parts):
            out.add(LOWP)
        if all(p - {F32, LOWP} for p in parts) and any(LOADED in p for p in parts):
            out.add(LOADED)
    if all(None in p for p in parts):
        out.add(None)
    return frozenset(out)
