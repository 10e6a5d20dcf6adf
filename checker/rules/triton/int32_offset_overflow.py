from __future__ import annotations

import re

import libcst as cst

from kcheck.rule import Rule
from kcheck.rules.triton import (
    META_PARAM, TRITON_TEXT, assignments, is_tl_attr, kernel_gate, kernels, names_in, nodes_under, tl_op,
)

# Sizes that stay small in serving: head, expert, top-k, group and tile counts, and the strides of
# per-row statistics (rstd, mean, lse) and rotary tables (cos, sin, freqs).
SMALL = re.compile(r"head|expert|topk|top_k|group|^[HE]$|^n_(blocks|tiles|chunks)$|^num_(tiles|chunks)$"
                   r"|rstd|mean|lse|cos|sin|freqs|indices"
                   r"|^(pid_|i_|idx_|cur_|off_)?(h|hq|hk|hv|kh|qh|kvh|qo_h)$", re.IGNORECASE)  # pid_h, i_hv: head ids
# Buffers sized by blocks or programs, not by the data: split partial sums, scratch, locks.
PARTIAL = re.compile(r"partial|scratch|workspace|lock|counter|semaphore"
                     r"|topk|_ids?(_|$)|idx|indices|table|_bt(_|$)|parent|slot|mapping", re.IGNORECASE)
# Calls that keep an index an index; any other call (tl.load, tl.arange, math) makes data or a vector.
INDEX_OPS = {"multiple_of", "max_contiguous", "minimum", "maximum"}


class Int32OffsetOverflow(Rule):
    """A program id multiplied by a runtime stride or size in 32-bit.

    ## What it does
    Inside a `@triton.jit` function, finds products of a program id (`tl.program_id(...)`, or a
    name computed from one) with a runtime argument (a stride or a size that is not a
    `tl.constexpr`), where neither side was cast to `tl.int64` first. Products with a block
    size (a `tl.constexpr`, or a parameter named like one, which KC504 reports), with a literal,
    with head, expert, top-k, group and tile counts or ids (`head * stride_h`, `pid_h`, `i_hv`,
    `pid_kh`), or with the
    strides of per-row statistics (`rstd`, `mean`, `lse`), index tables (`stride_state_indices_batch`)
    and rotary tables (`cos`, `sin`) are
    left alone: those stay small. So are offsets into block-sized buffers (a pointer parameter
    named `*partial*`, `scratch`, `workspace`, `lock`), into index tables (`topk_ids`, block
    tables `*table*`/`*_bt`, `slot_mapping`, parent-token tables: a few ints per token) and batch strides of a tensor that has no
    sequence stride (`stride_vb` beside only `stride_vh`, `stride_vv`: one token per batch entry,
    a decode step).

    ## Why is this bad?
    Program ids and the integer arguments Triton receives are 32-bit, so `pid * stride` wraps
    once the offset passes 2^31 and the kernel reads and writes at a wrong address, without an
    error. Serving tensors get there: logits for 16,384 tokens over a 151,936-token vocabulary
    have about 2.5 billion elements, and KV caches and MoE buffers are larger still. Casting
    after the multiplication is too late.

    ## Example
    ```python
    row = tl.program_id(0)
    x = tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols)
    ```

    ## Use instead
    ```python
    row = tl.program_id(0).to(tl.int64)
    x = tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols)
    ```
    """

    CODE = "KC502"
    NAME = "int32-offset-overflow"
    MESSAGE = ("{pid} * {other} is computed in 32 bits: it wraps past 2^31 on large tensors (logits, KV cache, "
               "MoE buffers); cast the program id to tl.int64 before multiplying")
    SEVERITY = "warning"
    KNOWLEDGE = ("triton-cuda/int64-offsets",)
    VALID = [
        """
import triton
import triton.language as tl
@triton.jit
def k(x_ptr, stride_row, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols)
""",
        """
import triton
import triton.language as tl
@triton.jit
def k(x_ptr, n_heads, stride_t, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    start = pid * BLOCK
    head = pid % n_heads
    token = tl.program_id(1)
    base = token.to(tl.int64) * stride_t + head * BLOCK
""",
    ]
    INVALID = [
        """
import triton
import triton.language as tl
@triton.jit
def k(x_ptr, stride_row, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols)
""",
        """
import triton
import triton.language as tl
@triton.jit
def k(logits_ptr, vocab_size, BLOCK: tl.constexpr):
    offset = (tl.program_id(axis=0) * vocab_size).to(tl.int64)
""",
    ]
    PREFILTER = (TRITON_TEXT, r"program_id")

    @classmethod
    def gate(cls, summary, config) -> bool:
        return kernel_gate(summary) and "program_id" in summary.all_names

    def leave_Module(self, original_node: cst.Module) -> None:
        for k in kernels(self.model):
            self._check(k)

    def _check(self, k) -> None:
        model = self.model
        runtime = k.runtime_params()
        pids: set[str] = set()

        def wide(expr) -> bool:
            return any(is_tl_attr(model, n, "int64", "uint64") for n in nodes_under(expr))

        def is_pid(expr) -> bool:
            found = False
            for n in nodes_under(expr):
                if isinstance(n, cst.Comparison):
                    return False  # a mask, not an index
                if isinstance(n, cst.Call):
                    op = tl_op(model, n)
                    if op == "program_id":
                        found = True
                    elif op not in INDEX_OPS:
                        return False  # loaded data, an offset vector, or math on values
                elif isinstance(n, cst.Name) and n.value in pids:
                    found = True
            return found and not wide(expr)

        params = set(k.params)

        def one_token_batch(stride: str) -> bool:
            """``stride_vb`` of a tensor whose only other strides are heads and features (no
            ``stride_vt``/``stride_vs``): one token per batch entry, as in a decode step."""
            m = re.fullmatch(r"stride_([a-z0-9]+?)_?b", stride)
            if not m:
                return False
            sibs = {p[len("stride_"):].lstrip("_")[len(m.group(1)):].lstrip("_") for p in params
                    if p.startswith("stride_" + m.group(1)) or p.startswith("stride_" + m.group(1) + "_")}
            return bool(sibs - {"b"}) and not any(s[:1] in ("t", "s", "n", "l", "m", "r") for s in sibs - {"b"})

        def small_buffer(n) -> bool:
            """The product offsets a partial-sum, scratch or lock buffer sized by blocks."""
            for anc in model.ancestors(n):
                if isinstance(anc, cst.BaseSmallStatement):
                    return False
                if isinstance(anc, cst.BinaryOperation) and isinstance(anc.operator, cst.Add):
                    if any(PARTIAL.search(x) for x in names_in(anc) & params):
                        return True
            return False

        def check(root) -> None:
            for n in nodes_under(root):
                if isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.Multiply):
                    if small_buffer(n):
                        continue
                    for pid_side, other in ((n.left, n.right), (n.right, n.left)):
                        big = {x for x in names_in(other) & runtime if not (SMALL.search(x) or META_PARAM.search(x)
                                                                             or one_token_batch(x))}
                        small_index = any(SMALL.search(x) for x in names_in(pid_side))  # a head or expert id
                        if big and is_pid(pid_side) and not wide(other) and not small_index:
                            self.report(n, pid=_text(pid_side), other=_text(other))
                            break

        for node in nodes_under(k.fn.body):
            if isinstance(node, cst.SimpleStatementLine):
                check(node)
                for name, stmt in assignments(node):
                    if is_pid(stmt.value) or (isinstance(stmt, cst.AugAssign) and name in pids):
                        pids.add(name)
                    else:
                        pids.discard(name)
            elif isinstance(node, (cst.If, cst.While)):
                check(node.test)
            elif isinstance(node, cst.For):
                check(node.iter)


def _text(node: cst.CSTNode) -> str:
    text = cst.Module([]).code_for_node(node).strip()
    return text if len(text) <= 40 else text[:37] + "..."
