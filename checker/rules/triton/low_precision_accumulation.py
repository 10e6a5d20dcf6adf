from __future__ import annotations

import re

import libcst as cst

from kcheck.rule import Rule
from kcheck.rules.triton import TRITON_TEXT, arg, is_tl_attr, kernels, nodes_under, tl_op
from kcheck.triton_values import F32, INT_POINTER, LOADED, LOW, values

LOW_DTYPES = ("float16", "bfloat16", "float8e4nv", "float8e5", "float8e4b15", "float8e4b8", "float8e5b16")
LOW_TEXT = re.compile(r"bfloat16|float16|\bhalf\b|bf16|fp16")
# A kernel whose docstring or comments say it reproduces 16-bit arithmetic on purpose (a reference
# for bf16 atomics, a bit-exact model of another kernel's rounding).
ON_PURPOSE = re.compile(
    r"bit[- ]?(?:exact|wise|comparable|identical|for[- ]bit)"
    r"|(?:match|mirror|reproduc|emulat|mimic)\w*\b[^.]{0,80}?\b(?:atomic|bf16|bfloat16|fp16|float16|half)",
    re.IGNORECASE)
# A loop bound that counts the experts a router selects per token (top-k: a handful).
TOPK = re.compile(r"top_?k|experts_per_tok", re.IGNORECASE)
# A comment at the end of a reduction's line that gives its type as FP32 (``# [N] fp32``): the
# buffer's type is set where the rule cannot see it (a cache allocated in another module).
FP32_COMMENT = re.compile(r"\b(?:fp32|f32|float32)\b", re.IGNORECASE)


class LowPrecisionAccumulation(Rule):
    """A reduction or dot product accumulated in the input's low precision.

    ## What it does
    Inside a `@triton.jit` function, finds three ways of accumulating in 16 bits or less:
    an accumulator created with `tl.zeros`/`tl.full` in `tl.float16`/`tl.bfloat16` (or in the
    input pointer's element type) and then added to; `tl.dot(..., out_dtype=tl.float16)`; and
    `tl.sum` over values loaded from memory, never cast to `tl.float32`, that the file shows are
    16-bit: every launch of the kernel in the module passes a tensor the module allocates or
    casts to bf16/fp16 (`torch.empty(..., dtype=torch.bfloat16)`, `x.to(torch.bfloat16)`,
    `.half()`, directly, through a helper's parameter or an attribute its class sets up). A sum
    over data whose type the file does not show (a caller's tensor, a buffer allocated in another
    module) is not reported: on the dev trees such data was as often fp32 or integer (states kept
    in fp32, int32 tile tables, fp32 logits) as bf16, so the guess was wrong more often than right.

    What each value holds comes from the Triton value model (`kcheck.triton_values`): launches
    by name or through a table of kernels (`k.combine[grid](...)` beside
    `SimpleNamespace(combine=_combine)`); integers by the load (`other=-1`) or the pointer's
    names (ids, counts, offsets); fp32 by the names of buffers kernels keep in FP32 (partials,
    scratch, sums, maxima, statistics, scales, also through a local row pointer such as
    `row = state_ptr + slot * stride`). The type survives reshapes and slices (`tl.reshape`,
    `tl.trans`, `tl.extract_slice`, `tl.split`, `tl.join`) and reductions. Values cast to 16 bits
    explicitly (`(x * x).to(tl.bfloat16)`: a kernel that reproduces a BF16 reference on purpose)
    do not count, nor a 16-bit accumulator every term of which is cast to 16 bits first, nor a
    kernel whose docstring or comments say it models 16-bit rounding on purpose (bit-exact with,
    or mirroring, bf16 atomics), nor an accumulator whose dtype name has an fp32 assignment left
    commented out beside it (`# compute_dtype = tl.float32`: fp32 weighed and set aside), nor an
    accumulator updated only in a loop over the router's top-k (`for i in range(topk)`: a handful
    of terms, one per selected expert, not a long reduction), nor a
    16-bit zero tile created in a block that returns after it (written out for an empty causal
    block). Values that meet an FP32 accumulator or running
    maximum (`tl.zeros(..., dtype=tl.float32)`, a Python float carried through a loop) are FP32
    by promotion, and a sum masked by an equality (`tl.sum(tl.where(offs == j, x, 0))`) selects
    one element and is exact. `tl.dot` without `out_dtype` accumulates in FP32 and is fine.

    The accumulator's dtype may be held by a name: a local bound once (`acc_dtype =
    c_ptr.type.element_ty`, used for `tl.zeros` and for the dot's `out_dtype`), or a `tl.constexpr`
    parameter named for the data's type (`dtype`, `input_dtype`, not `acc_dtype` or `out_dtype`).
    Such a parameter is taken as the data's element type (a kernel library whose launchers, in
    another module, pass the input's dtype converted to a `tl` dtype) unless a launch or jit caller
    in the module passes `tl.float32` for it.

    Limits: a `tl.sum` over a caller's bf16 activations when the file does not show their type
    is not reported.

    What Triton does (its `triton/language/standard.py`): `tl.sum` picks a wider result type only
    for integers narrower than 32 bits (int32/uint32); a floating-point input is reduced in its own
    type unless `dtype=` is given. `tl.max`/`tl.min` convert 16-bit floats to fp32 first.
    `tl.dot` accumulates in `out_dtype`, fp32 by default.

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
        """
import torch
import triton
import triton.language as tl
_BUFFERS = {}
@triton.jit
def k(x_ptr, buf_ptr, n_cols, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    p = tl.load(buf_ptr + cols, mask=cols < n_cols, other=0.0)
    s = tl.sum(p, axis=0)
def sample(logits):
    assert logits.dtype == torch.float32
    buf = _BUFFERS.get(logits.device)
    if buf is None:
        buf = logits.new_empty(logits.shape)
        _BUFFERS[logits.device] = buf
    k[(1,)](logits, buf, logits.shape[-1], BLOCK=1024)
# bf16 models sample from fp32 logits
""",
    ]
    INVALID = [
        """
import torch
import triton
import triton.language as tl
@triton.jit
def k(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr, tl.sum(x * x, axis=0) / n_cols)
def mean_square(x):
    out = torch.empty((), dtype=torch.float32, device=x.device)
    k[(1,)](x.to(torch.bfloat16), out, x.numel(), BLOCK=4096)
    return out
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
    NEEDS = ("triton kernel",)
    _wide: set[str] = set()  # the current kernel's parameters launched with float32 buffers

    def leave_Module(self, original_node: cst.Module) -> None:
        low_text = bool(LOW_TEXT.search(self.context.source))
        on_purpose = bool(ON_PURPOSE.search(self.context.source))  # the file says so somewhere: which kernel?
        for k in kernels(self.model):
            if on_purpose and ON_PURPOSE.search(cst.Module([]).code_for_node(k.fn)):
                continue  # says it models 16-bit rounding (bf16 atomics, a bit-exact twin) on purpose
            self._values = values(self.model, k.fn)
            self._accumulators(k)
            self._dots(k)
            if low_text:
                self._sums(k)

    def _low_dtype(self, node) -> bool:
        """``tl.float16``/``tl.bfloat16``/fp8, or the element type of a pointer whose launches the
        module does not show in fp32 (nor an integer type, nor a name of ids or counts)."""
        if node is None:
            return False
        found = self._values.dtype_value(node)
        if found not in (LOW, LOADED):
            return False
        text = self.model.dotted(node) or ""
        return found == LOW or not INT_POINTER.search(text.split(".")[0])


    def _accumulators(self, k) -> None:
        created: dict[str, cst.Call] = {}
        for name, value, stmt in k.assigns:
            if type(value) is cst.Call and tl_op(self.model, value) in ("zeros", "full"):
                index = 1 if tl_op(self.model, value) == "zeros" else 2
                dtype = arg(value, index, "dtype")
                if self._low_dtype(dtype) and not self._opt_in(stmt) and not _fp32_commented_out(k, dtype):
                    created[name] = value
        reach = {name: _returning_block(self.model, call) for name, call in created.items()}
        updates: dict[str, list] = {}
        for name, value, stmt in k.assigns:
            if name in created and self._updates(name, value, stmt, k) and (
                    reach[name] is None or any(a is reach[name] for a in self.model.ancestors(stmt))):
                updates.setdefault(name, []).append((self._addend(name, value, stmt, k), stmt))
        selectors = _selector_names(k)
        for name, addends in updates.items():
            if all(self._cast_low(a, k) for a, _ in addends):
                continue  # every term is cast to 16 bits first: the kernel models 16-bit adds on purpose
            if all(self._selects_once(a, stmt, selectors) for a, stmt in addends):
                continue  # each element gets one nonzero term over the loop: the adds are exact
            if all(self._over_topk(stmt, created[name]) for _, stmt in addends):
                continue  # a handful of terms, one per routed expert: not a long reduction
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

    def _selects_once(self, addend, stmt, selectors: set[str]) -> bool:
        """The term added in a loop is masked by an equality that the loop variable picks
        (``tl.load(p, mask=axis_masks[axis])`` with ``h_mask = (pairs % 3) == 1``,
        ``tl.where(expert == e, x, 0)``): each element receives one nonzero term in all."""
        loop = next((a for a in self.model.ancestors(stmt) if type(a) is cst.For), None)
        if loop is None or not self._selects(addend, selectors):
            return False
        variables = {n.value for n in nodes_under(loop.target) if type(n) is cst.Name}
        return any(type(n) is cst.Name and n.value in variables for n in nodes_under(addend))

    def _over_topk(self, stmt, creation) -> bool:
        """The update's innermost loop, entered after the accumulator is created, runs over the
        router's top-k (``for i in range(topk)``): the sum has a handful of terms, one per
        selected expert, and 16-bit rounding of so few adds stays within a few units."""
        created_in = set(map(id, self.model.ancestors(creation)))
        loop = next((a for a in self.model.ancestors(stmt) if type(a) is cst.For), None)
        if loop is None or id(loop) in created_in:
            return False
        return bool(TOPK.search(cst.Module([]).code_for_node(loop.iter)))

    def _cast_low(self, expr, k, depth: int = 3) -> bool:
        """``x.to(tl.bfloat16)``/``tl.cast(x, tl.float16)``, directly or through a name every
        assignment of which is one."""
        if type(expr) is cst.Call:
            is_cast = tl_op(self.model, expr) == "cast" or (type(expr.func) is cst.Attribute
                                                            and expr.func.attr.value == "to")
            return is_cast and self._values.of(expr) == LOW
        if type(expr) is cst.Name and depth > 0:
            values = k.values(expr.value)
            return bool(values) and all(self._cast_low(v, k, depth - 1) for v in values)
        return False

    def _opt_in(self, node) -> bool:
        """``node`` sits in one branch of an ``if``/``else`` whose other branch accumulates in FP32
        (``if USE_FP32_ACCUM: acc = tl.zeros(.., tl.float32) else: acc = tl.zeros(.., c.dtype)``,
        or the same for a dot's ``out_dtype``): the kernel offers both and the caller picks, so the
        16-bit path is an explicit choice, not an oversight."""
        for anc in self.model.ancestors(node):
            if type(anc) is not cst.If or anc.orelse is None:
                continue
            other = anc.orelse if any(a is anc.body for a in self.model.ancestors(node)) else anc.body
            for sub in nodes_under(other):
                if type(sub) is cst.Call and tl_op(self.model, sub) in ("zeros", "full", "dot"):
                    op = tl_op(self.model, sub)
                    dtype = arg(sub, 99, "out_dtype") if op == "dot" else \
                        arg(sub, 1 if op == "zeros" else 2, "dtype")
                    if dtype is not None and self._values.dtype_value(dtype) == F32:
                        return True
            return False
        return False

    def _dots(self, k) -> None:
        for call in k.calls(self.model, "dot"):
            out = arg(call, 99, "out_dtype")
            if out is not None and (is_tl_attr(self.model, out, *LOW_DTYPES) or self._low_dtype(out)) \
                    and not self._opt_in(call):
                self.report(call, what="tl.dot(..., out_dtype=<16-bit type>) accumulates the product in 16 bits")

    def _selects(self, values, selectors: set[str]) -> bool:
        """The summed values are masked by an equality (``tl.where(offs == j, x, 0)``,
        ``x * (cols == idx)``): the sum picks one element per row and adds nothing."""
        return _equality(values) or any(type(n) is cst.Name and n.value in selectors for n in nodes_under(values))

    def _shown_low(self, expr, k) -> bool:
        """Some load feeding ``expr`` reads a pointer every launch in the module fills with a 16-bit
        tensor (``torch.empty(..., dtype=torch.bfloat16)``, ``x.half()``, a parameter its callers
        fill that way), and none reads one shown in FP32: the sum's data is 16-bit by what the file
        shows, not by a guess. Followed through the names ``expr`` reads (three assignments deep)."""
        elements = self._values.elements
        seen: set[str] = set()
        todo, found = [expr], set()
        while todo:
            node = todo.pop()
            for sub in nodes_under(node):
                if type(sub) is cst.Call and tl_op(self.model, sub) == "load":
                    pointer = arg(sub, 0, "pointer")
                    if pointer is not None:
                        found |= {elements.get(b) for b in self._values.buffers(pointer)}
                elif type(sub) is cst.Name and sub.value not in seen and len(seen) < 24:
                    seen.add(sub.value)
                    todo.extend(k.values(sub.value))
        return LOW in found and not (found & {F32})

    def _sums(self, k) -> None:
        model = self.model
        selectors: set[str] = set()  # names holding an equality mask (cols == idx)
        for node in nodes_under(k.fn.body):
            if type(node) is cst.SimpleStatementLine:
                comment = node.trailing_whitespace.comment
                # ``s = tl.sum(kv * w, axis=0)  # [BLOCK] fp32``: the line's own type annotation
                stated = comment is not None and bool(FP32_COMMENT.search(comment.value))
                for sub in nodes_under(node) if not stated else ():
                    if type(sub) is cst.Call and tl_op(model, sub) == "sum" and arg(sub, 99, "dtype") is None:
                        summed = arg(sub, 0, "input")
                        if summed is None or self._selects(summed, selectors):
                            continue  # sum(where(idx == j, x, 0)): picks one element, exact
                        # LOADED, not LOW: an explicit 16-bit cast is on purpose; and only data the
                        # module shows is 16-bit (what its launches pass), not data of unknown type
                        if self._values.of(summed) == LOADED and self._shown_low(summed, k):
                            self.report(sub, what="tl.sum over 16-bit values loaded from memory keeps their precision")
                for stmt in node.body:
                    if type(stmt) is cst.Assign and len(stmt.targets) == 1 and type(stmt.targets[0].target) is cst.Name \
                            and _equality(stmt.value):
                        selectors.add(stmt.targets[0].target.value)


def _fp32_commented_out(k, dtype) -> bool:
    """The kernel keeps an fp32 choice for the accumulator's dtype name commented out
    (``compute_dtype = out.dtype.element_ty`` above ``# compute_dtype = tl.float32``): the author
    weighed fp32 and chose the output's type on purpose (to match another framework's rounding)."""
    if type(dtype) is not cst.Name:
        return False
    pattern = re.compile(r"#\s*%s\s*=\s*(?:tl|triton\.language)\.float32\b" % re.escape(dtype.value))
    return bool(pattern.search(cst.Module([]).code_for_node(k.fn)))


def _returning_block(model, node) -> cst.IndentedBlock | None:
    """The block holding ``node``'s statement when that block returns after it (``if n_blocks <= 0:
    acc = tl.zeros(...); tl.store(out, acc); return``): the value is dead past the block, so a
    later ``acc += ...`` updates another accumulator of the same name."""
    stmt = next((a for a in model.ancestors(node) if type(a) is cst.SimpleStatementLine), None)
    block = model.parent(stmt) if stmt is not None else None
    if type(block) is not cst.IndentedBlock:
        return None
    after = block.body[[id(b) for b in block.body].index(id(stmt)) + 1:]
    returns = any(type(b) is cst.SimpleStatementLine and any(type(x) is cst.Return for x in b.body) for b in after)
    return block if returns else None


def _selector_names(k) -> set[str]:
    """Names the kernel assigns from an equality mask (``h = (pairs % 3) == 1``), or from such
    names (``t = ~(h | w)``, ``masks = (t, h, w)``)."""
    found: set[str] = set()
    for _ in range(3):
        for name, value, _stmt in k.assigns:
            if _equality(value) or any(type(n) is cst.Name and n.value in found for n in nodes_under(value)):
                found.add(name)
    return found


def _equality(expr) -> bool:
    return any(type(n) is cst.Comparison and any(type(t.operator) is cst.Equal for t in n.comparisons)
               for n in nodes_under(expr))
