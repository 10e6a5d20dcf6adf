from __future__ import annotations

import re

import libcst as cst

from kcheck.rule import Rule
from kcheck.rules.triton import (
    META_PARAM, TRITON_TEXT, assignments, cast_source, kernels, names_in, nodes_under, tl_op,
)
from kcheck.rules.triton.launches import launch_words
from kcheck.rules.triton.sizes import (
    DECODE_QUERY, INDEX_OPS, LARGE_TENSOR, PARTIAL, SEQUENCE, SMALL, SMALL_FILE, SMALL_KERNEL, SMALL_TENSOR, feature_rows,
    latent_rows, mirror, one_token_batch, sequence_batch, strides,
)
from kcheck.triton_values import I64, values as triton_values


class Int32OffsetOverflow(Rule):
    """A program id multiplied by a runtime stride or size in 32-bit, into a tensor the file shows is large.

    ## What it does
    Inside a `@triton.jit` function, finds products of a program id (`tl.program_id(...)`, or a
    name computed from one) with a runtime argument (a stride or a size that is not a
    `tl.constexpr`) or a compile-time stride or size (`stride_row: tl.constexpr`,
    `hidden_size: tl.constexpr`: an int32 in the product all the same) that the Triton value
    model (`kcheck.triton_values`) finds 32-bit: neither side cast to `tl.int64` (`.to`,
    `tl.cast(n, tl.int64)`, also through a name, as in `stride = tl.cast(stride, tl.int64)`),
    annotated `tl.int64`, or loaded from an int64 tensor the module's launcher allocates; and reports one only when
    the file gives evidence that the tensor it addresses can pass 2^31 elements:

    - a large tensor's name on the pointer the product offsets, on the stride or size, or on
      what the module's launches of the kernel pass for them (`logits.stride(0)`, `vocab_size`,
      `kv_cache`, `k_buffer`, `hidden_states`, `hidden_size`, `embed`);
    - a product of two runtime sizes (`b * max_len * hidden_dim`, also when the program id
      side holds one: `(off_bh * n) * d`), or a row index over a
      batch of sequences times a row stride (`base = batch * seq_len + t`, then
      `base * row_stride`; not `bid * block_size + row`, rows of a small draft block);
    - a batch stride beside a sequence stride and a head stride (`stride_vb`, `stride_vt`,
      `stride_vh`; `stride_b` beside `stride_s`; attention's `stride_qz` beside `stride_qm`
      and `stride_qh`): each batch entry holds a sequence of per-head vectors;
    - a normalisation kernel (`norm` in its name) that loads a per-feature weight
      (`tl.load(W + cols)`): its rows are hidden vectors, tokens x hidden in all, unless the
      file shows they are a model's low-rank latent (the launches pass a `kv_lora_rank`-like
      width, or the module's or kernel's docstring says it serves multi-head latent attention);
    - the same program id cast to `tl.int64` for the same dimension of a sibling tensor
      (`pid_n.to(tl.int64) * stride_qn` beside `pid_n * stride_on`).

    Left alone: products with a block size (an upper-case `tl.constexpr`, or a parameter named like one,
    which KC504 reports), with a literal, with head, expert, top-k, group and tile counts or ids
    (`head * stride_h`, `pid_h`, `i_hv`), with a row of a decode batch (`rows = request *
    DECODE_QUERY_LEN + q`: requests times the query tokens each brings to the step, whatever
    the row width), with a remainder by a compile-time constant
    (`slot = token % PAGE_SIZE`, a slot inside a page, unless the launches pass a whole tensor's
    `numel()` for the other factor, which makes it an index of whole slices), strides of per-row statistics (`rstd`, `mean`, `lse`),
    index tables and rotary tables; offsets into block-sized buffers (`*partial*`, `scratch`,
    `workspace`, `lock`) and into routing, index and scale tables (`gating_output`,
    `router_logits`, `topk_ids`, block tables, `slot_mapping`, positions, sequence lengths,
    per-group scales, `index` flags, per-program `dW`/`dB` partial gradients); batch strides
    of a tensor with no sequence stride (one token per batch entry: a decode step); kernels of
    routing, sampling, speculative decoding, timestep-embedding tables, attention metadata,
    split-KV reduction and decode-step state updates (by kernel name), and files of
    speculative decoding and sampling. Those address per-token or per-request tensors a few
    values wide: tokens x experts or a draft-token table stays far below 2^31.

    Limits: the rule cannot read shapes, so a large tensor with none of this evidence (a
    generic `x`/`out` row of a kernel that is not a norm, `q` behind `*q.stride()`) is not
    reported, and a name can mislead (a `hidden` table that is small).

    ## Why is this bad?
    Program ids and the integer arguments Triton receives are 32-bit, so `pid * stride` wraps
    once the offset passes 2^31 and the kernel reads and writes at a wrong address, without an
    error. Serving and training tensors get there: logits for 16,384 tokens over a
    151,936-token vocabulary have about 2.5 billion elements, a KV cache pool is larger still,
    and a 262,144-token batch of 8,192-wide hidden states has 2^31. Casting after the
    multiplication is too late.

    ## Example
    ```python
    row = tl.program_id(0)
    x = tl.load(logits_ptr + row * stride_row + cols, mask=cols < n_cols)
    ```

    ## Use instead
    ```python
    row = tl.program_id(0).to(tl.int64)
    x = tl.load(logits_ptr + row * stride_row + cols, mask=cols < n_cols)
    ```
    """

    CODE = "KC502"
    NAME = "int32-offset-overflow"
    MESSAGE = ("{pid} * {other} is computed in 32 bits: it wraps past 2^31 on large tensors (logits, KV cache, "
               "MoE buffers); cast the program id to tl.int64 before multiplying")
    SEVERITY = "warning"
    PREVIEW = True  # below the bar on the test split: benchmarks/results/evaluation-test.md
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
        """
import triton
import triton.language as tl
@triton.jit
def k(gating_output_ptr, stride_gm, BLOCK_E: tl.constexpr):
    token = tl.program_id(0)
    scores = tl.load(gating_output_ptr + token * stride_gm + tl.arange(0, BLOCK_E))
""",
    ]
    INVALID = [
        """
import triton
import triton.language as tl
@triton.jit
def k(logits_ptr, stride_row, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(logits_ptr + row * stride_row + cols, mask=cols < n_cols)
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
    NEEDS = ("triton kernel",)

    def leave_Module(self, original_node: cst.Module) -> None:
        for k in kernels(self.model):
            self._check(k)

    def _check(self, k) -> None:
        if SMALL_KERNEL.search(k.name) or SMALL_FILE.search(self.context.path):
            return
        model = self.model
        runtime = k.runtime_params() | strides(k.constexprs)
        pids: set[str] = set()
        ever_pids: set[str] = set()
        scaled: set[str] = set()  # pid names already multiplied by a runtime size (batch * seq_len + t)

        vals = triton_values(model, k.fn)

        def wide(expr) -> bool:
            return vals.of(expr) == I64  # .to(tl.int64), tl.cast(n, tl.int64), an int64 load or argument

        bounded: set[str] = set()  # names whose latest value is a remainder by a compile-time constant

        def below_constant(expr) -> bool:
            """``x % PAGE_SIZE`` with a compile-time modulus (a ``tl.constexpr`` or a literal), or a
            name holding one: the remainder stays below the constant, a small index like a head id."""
            if type(expr) is cst.Name:
                return expr.value in bounded
            if not (type(expr) is cst.BinaryOperation and type(expr.operator) is cst.Modulo):
                return False
            right = expr.right
            return type(right) is cst.Integer or (type(right) is cst.Name and right.value in k.constexprs)

        def whole_slices(other) -> bool:
            """The other factor is a whole tensor's element count at launch (``x.numel() // n``): a
            small index times it addresses whole slices, so it still spans the tensor."""
            return any("numel" in launched.get(x, ()) for x in names_in(other) & runtime)

        def is_pid(expr) -> bool:
            found = False
            for n in nodes_under(expr):
                if type(n) is cst.Comparison:
                    return False  # a mask, not an index
                if type(n) is cst.Call:
                    op = tl_op(model, n)
                    if op == "program_id":
                        found = True
                    elif op not in INDEX_OPS:
                        return False  # loaded data, an offset vector, or math on values
                elif type(n) is cst.Name and n.value in pids:
                    found = True
            return found and not wide(expr)

        params = set(k.params)

        def small_buffer(n) -> bool:
            """The product offsets a partial-sum, scratch or lock buffer sized by blocks."""
            for anc in model.ancestors(n):
                if isinstance(anc, cst.BaseSmallStatement):
                    return False
                if type(anc) is cst.BinaryOperation and type(anc.operator) is cst.Add:
                    if any(PARTIAL.search(x) for x in names_in(anc) & params):
                        return True
            return False

        launched = launch_words(self.model, k)

        def bases(n) -> set[str]:
            """The pointer parameters the product offsets: the other terms of its address sum, or
            the target of ``ptr += pid * stride``."""
            out: set[str] = set()
            for anc in model.ancestors(n):
                if type(anc) is cst.AugAssign and type(anc.target) is cst.Name:
                    out.add(anc.target.value)
                if isinstance(anc, (cst.BaseSmallStatement, cst.Call)):
                    break
                if type(anc) is cst.BinaryOperation and type(anc.operator) is cst.Add:
                    out |= names_in(anc) & params
            return out

        def evidence(n, pid_side, other, big) -> str:
            """What the file says about the size of the tensor this product addresses (see the
            docstring): a large tensor's name, a product of two sizes, a sequence-holding batch
            stride, a feature row with a per-feature weight, or a sibling offset already widened;
            "" when it says nothing or names a small table."""
            ptrs = bases(n)
            ptr_words = ptrs | {w for p in ptrs for w in launched.get(p, set())} - {"stride", "shape", "size"}
            if any(SMALL_TENSOR.search(w) for w in ptr_words):
                return ""  # the offset addresses a routing, index or scale table
            names = ptrs | big
            words = set(names)
            for name in names:
                words |= launched.get(name, set())
            if any(LARGE_TENSOR.search(w) and not SMALL_TENSOR.search(w) for w in words):
                return "name:" + ",".join(sorted(w for w in words if LARGE_TENSOR.search(w)))
            # sizes over the whole product: (off_bh * n) * d multiplies two sizes as pid * (n * d) does
            sizes = {x for x in (names_in(other) | names_in(pid_side)) & runtime - ever_pids
                     if not (SMALL.search(x) or META_PARAM.search(x) or re.search(r"_1$|col", x, re.IGNORECASE))}
            if len(sizes) >= 2 or (names_in(pid_side) & scaled and sizes):
                return "dims"  # pid * seq_len * stride, (b * T + t) * row_stride: two sizes multiplied
            if any(sequence_batch(x, params) for x in big):
                return "seqbatch"
            if norm_rows:
                return "rows"
            return "widened" if any(mirror(x, y) for x in big for p in names_in(pid_side) & set(widened)
                                    for y in widened[p]) else ""

        def check(root, report: bool) -> None:
            for n in nodes_under(root):
                if type(n) is cst.BinaryOperation and type(n.operator) is cst.Multiply:
                    if small_buffer(n):
                        continue
                    for pid_side, other in ((n.left, n.right), (n.right, n.left)):
                        big = {x for x in names_in(other) & runtime if not (SMALL.search(x) or META_PARAM.search(x)
                                                                             or one_token_batch(x, params))}
                        small_index = any(SMALL.search(x) for x in names_in(pid_side)) \
                            or decode_rows(pid_side)  # a head or expert id, or a row of a decode batch
                        if big and is_pid(pid_side) and not wide(other) and not small_index:
                            if below_constant(pid_side) and not whole_slices(other):
                                break  # slot * stride_slot with slot = token % PAGE_SIZE: inside one page
                            if report and evidence(n, pid_side, other, big):
                                self.report(n, pid=_text(pid_side), other=_text(other))
                            break

        def decode_rows(expr) -> bool:
            """``request * DECODE_QUERY_LEN + q``, or a name holding one: a row of a decode batch,
            requests times the query tokens each brings to the step (bounded by the engine's
            request cap), not a row over all tokens."""
            if names_in(expr) & decode_batch:
                return True
            return any(type(m) is cst.BinaryOperation and type(m.operator) is cst.Multiply
                       and any(DECODE_QUERY.search(x) for x in names_in(m) & params)
                       for m in nodes_under(expr))

        decode_batch: set[str] = set()  # names holding a decode-batch row

        def walk(report: bool) -> None:
            pids.clear()
            bounded.clear()
            decode_batch.clear()
            for node in nodes_under(k.fn.body):
                if type(node) is cst.SimpleStatementLine:
                    check(node, report)
                    for name, stmt in assignments(node):
                        if type(stmt) is not cst.AugAssign and below_constant(stmt.value) \
                                and type(stmt.value) is not cst.Name:
                            bounded.add(name)
                        else:
                            bounded.discard(name)
                        if is_pid(stmt.value) or (type(stmt) is cst.AugAssign and name in pids):
                            pids.add(name)
                            ever_pids.add(name)
                            if any(type(m) is cst.BinaryOperation and type(m.operator) is cst.Multiply
                                   and any(SEQUENCE.search(x) for x in names_in(m) & runtime)
                                   for m in nodes_under(stmt.value)):
                                scaled.add(name)  # batch * seq_len + t: a row of a whole batch of sequences
                            if decode_rows(stmt.value) or (type(stmt) is cst.AugAssign and name in decode_batch):
                                decode_batch.add(name)
                            else:
                                decode_batch.discard(name)
                        else:
                            pids.discard(name)
                            decode_batch.discard(name)
                elif type(node) in (cst.If, cst.While):
                    check(node.test, report)
                elif type(node) is cst.For:
                    check(node.iter, report)

        walk(report=False)
        norm_rows = feature_rows(model, k) and not latent_rows(model, k, self.context.module)
        # pid -> the strides it multiplies after a cast to int64 (``pid_n.to(tl.int64) * stride_qn``)
        widened: dict[str, set[str]] = {}
        for n in nodes_under(k.fn.body):
            if type(n) is cst.BinaryOperation and type(n.operator) is cst.Multiply:
                for a, b in ((n.left, n.right), (n.right, n.left)):
                    source = cast_source(model, a)
                    if source in ever_pids and wide(a):
                        widened.setdefault(source, set()).update(names_in(b) & runtime)
        walk(report=True)


def _text(node: cst.CSTNode) -> str:
    text = cst.Module([]).code_for_node(node).strip()
    return text if len(text) <= 40 else text[:37] + "..."
