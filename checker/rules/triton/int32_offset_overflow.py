from __future__ import annotations

import libcst as cst

from kcheck.claims import WORKLOAD_CLAIMS
from kcheck.rule import Rule
from kcheck.rules.triton import (
    META_PARAM, TRITON_TEXT, assignments, cast_source, kernels, names_in, nodes_under, tl_op,
)
from kcheck.rules.triton.launches import launch_words
from kcheck.rules.triton.sizes import (
    BATCH_HEAD, CACHE_TENSOR, DECODE_QUERY, INDEX_OPS, LOGITS_TENSOR, PARTIAL, REQUEST, ROTARY, SEQUENCE, SMALL, SMALL_FILE,
    SMALL_KERNEL, SMALL_TENSOR, mirror, one_token_batch, pinned_elements, sequence_batch, strides,
)
from kcheck.triton_values import I64, values as triton_values


class Int32OffsetOverflow(Rule):
    """An int32 index product into a tensor that can pass 2^31 elements: a KV cache, logits, a batch of sequences.

    ## What it does
    Inside a `@triton.jit` function, finds products of a program id (`tl.program_id(...)`, or a
    name computed from one) with a runtime stride or size, or a lower-case compile-time one
    (`stride_row: tl.constexpr`: an int32 in the product all the same), that the Triton value
    model (`kcheck.triton_values`) finds 32-bit: neither side cast to `tl.int64` (`.to`,
    `tl.cast`, also through a name), annotated `tl.int64`, or loaded from an int64 tensor the
    module's launcher allocates.

    Whether such a product can wrap depends on the extent of the tensor it addresses, not on
    the product's shape, so the rule reports one only where the file shows why that tensor can
    pass 2^31 elements, and names the reason in the message:

    - **a KV cache or cache pool**: the pointer, the stride, or what the module's launches pass
      for them names one (`kv_cache`, `k_cache`, `key_cache`, `k_buffer`, `kv_pool`, a `cache`
      pointer that is not a rotary table). A pool holds every live request's pages, often for
      every layer, so a page, block or slot id times the page stride covers tens of billions of
      elements;
    - **vocabulary-wide logits**: `logits`, `vocab_size`, `lm_head` on the pointer, stride or
      launch. Tokens x vocabulary reaches 2^31 at 16K tokens of a 150K vocabulary;
    - **a batch of sequences**: the batch stride of a tensor whose other strides show a sequence
      and a head dimension (`stride_qz` beside `stride_qm` and `stride_qh`, `stride_vb` beside
      `stride_vt` and `stride_vh`), or a batch index times a sequence length and a width
      (`b * seq_len * width`): one step of the index skips a whole sequence;
    - **a [batch, heads, seq, dim] tensor**: a program id over batch x heads (`off_bh`, `i_bh`,
      `off_hz`) times a runtime size or stride: one step skips a head's whole sequence;
    - **a dimension the kernel itself widens**: the same program id cast to `tl.int64` for the
      same dimension of a sibling tensor (`pid_n.to(tl.int64) * stride_qn` beside
      `pid_n * stride_on`).

    Left alone, because the addressed tensor stays far below 2^31 elements under realistic
    workloads: a row of one activation matrix (a norm's, an MLP's or a GEMV's rows: one call's
    tokens x hidden, including `[B, M, F]` and `[N, C, L]` activations addressed by
    `batch * M * F`), whose size the engine's per-step token budget or the training micro-batch
    bounds; small indices (head, expert, top-k, group and tile ids, `pid_h`, `i_hv`; a row of a
    decode batch, `request * DECODE_QUERY_LEN + q`; a remainder by a compile-time constant,
    `token % PAGE_SIZE`) times any stride; buffers sized by the grid or a few values per row
    (`*partial*`, `scratch`, `workspace`, `lock`, per-program `dW`/`dB`, per-row statistics such
    as `lse`, `rstd`, `mean`, `delta`); routing, index and scale tables (`gating_output`,
    `topk_ids`, block tables, `slot_mapping`, positions, sequence lengths, per-group scales);
    batch strides of a tensor with no sequence stride (one token per batch entry); kernels of
    routing, sampling, speculative decoding, attention metadata, split-KV reduction and
    decode-step state updates, and files of speculative decoding and sampling; and every product
    in a file that pins its problem's shapes as module-level integers (`B = 2`, `T = 1024`,
    `H = 8`, `K = 128`: a benchmark task) whose product stays below 2^31, and every product in a
    benchmark task's solution (a `ModelNew`, a solution named `Model`, a leaderboard
    `custom_kernel`) that states no shapes: it runs on its task's fixed inputs, which nothing here
    shows reach 2^31 elements.

    Limits: the rule reads names and launches, not shapes. A large tensor with none of this
    evidence is not reported (a generic softmax over attention scores `[B*H*S, S]`, a linear
    layer used as an LM head, a batch x heads index named `head`), and the page or block id
    loaded from a block table is not followed (only program-id products are checked).

    ## Why is this bad?
    Program ids and the integer arguments Triton receives are 32-bit, so `pid * stride` wraps
    once the offset passes 2^31 and the kernel reads and writes at a wrong address, without an
    error. Tensors that outgrow one forward's activations get there: logits for 16,384 tokens
    over a 151,936-token vocabulary have about 2.5 billion elements, and a KV cache pool of
    tens of gigabytes holds tens of billions. Casting after the multiplication is too late.

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
    MESSAGE = ("{pid} * {other} is computed in 32 bits and addresses {why}, which can pass 2^31 elements: "
               "cast the index to tl.int64 before multiplying")
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
        """
import triton
import triton.language as tl
@triton.jit
def rms_norm(x_ptr, w_ptr, stride_row, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=cols < n_cols)
    r = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(x_ptr + row * stride_row + cols, x * r * w, mask=cols < n_cols)
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
        """
import triton
import triton.language as tl
@triton.jit
def k(k_cache_ptr, stride_page, PAGE: tl.constexpr):
    page = tl.program_id(0)
    tl.store(k_cache_ptr + page * stride_page + tl.arange(0, PAGE), tl.zeros((PAGE,), tl.float16))
""",
    ]
    PREFILTER = (TRITON_TEXT, r"program_id")
    NEEDS = ("triton kernel",)

    def leave_Module(self, original_node: cst.Module) -> None:
        pinned = pinned_elements(original_node)
        if pinned is not None and pinned < 2 ** 31:
            return  # the file pins its problem's shapes (B = 2, T = 1024, ...): every tensor is small
        if pinned is None and any(c.kind in WORKLOAD_CLAIMS for c in self.model.kernel_claims):
            return  # a benchmark task's solution: its tensors are the task's fixed inputs, not stated here
        for k in kernels(self.model):
            self._check(k)

    def _check(self, k) -> None:
        if SMALL_KERNEL.search(k.name) or SMALL_FILE.search(self.context.path):
            return
        model = self.model
        runtime = k.runtime_params() | strides(k.constexprs)
        pids: set[str] = set()
        ever_pids: set[str] = set()

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

        adds = [m for m in nodes_under(k.fn.body) if type(m) is cst.BinaryOperation and type(m.operator) is cst.Add]

        def used_with(name: str) -> set[str]:
            """The parameters summed with ``name`` where it is used: the pointers an offset held in
            a name is added to (``base = b * stride``, then ``x_ptr + base + cols``)."""
            return {x for m in adds if name in names_in(m) for x in names_in(m) & params}

        def bases(n) -> set[str]:
            """The pointer parameters the product offsets: the other terms of its address sum, the
            target of ``ptr += pid * stride``, or where a name holding the product is added."""
            out: set[str] = set()
            for anc in model.ancestors(n):
                if type(anc) is cst.AugAssign and type(anc.target) is cst.Name:
                    out.add(anc.target.value)
                if type(anc) is cst.Assign and len(anc.targets) == 1 and type(anc.targets[0].target) is cst.Name:
                    out |= used_with(anc.targets[0].target.value)  # base = b * stride, then x_ptr + base
                if isinstance(anc, (cst.BaseSmallStatement, cst.Call)):
                    break
                if type(anc) is cst.BinaryOperation and type(anc.operator) is cst.Add:
                    out |= names_in(anc) & params
            return out

        def evidence(n, pid_side, other, big) -> str:
            """Why the tensor this product addresses can pass 2^31 elements (see the docstring): a KV
            cache or cache pool, vocabulary-wide logits, the batch stride of a batch of sequences, a
            batch x heads index over whole sequences, or a dimension the kernel widens elsewhere;
            "" when the file shows none of these (a row of one activation matrix, a small index,
            a buffer sized by the grid)."""
            ptrs = bases(n)
            ptr_words = ptrs | {w for p in ptrs for w in launched.get(p, set())} - {"stride", "shape", "size"}
            if any(SMALL_TENSOR.search(w) for w in ptr_words):
                return ""  # the offset addresses a routing, index or scale table
            names = ptrs | big
            words = set(names)
            for name in names:
                words |= launched.get(name, set())
            words = {w for w in words if not (SMALL_TENSOR.search(w) or ROTARY.search(w))}
            cache = sorted(w for w in words if CACHE_TENSOR.search(w))
            if cache:
                return "a KV cache or cache pool (" + ", ".join(cache[:2]) + ")"
            logits = sorted(w for w in words if LOGITS_TENSOR.search(w))
            if logits and not any(REQUEST.search(x) for x in names_in(pid_side)):  # one row per request: small
                return "vocabulary-wide logits (" + ", ".join(logits[:2]) + ")"
            batch = sorted(x for x in big if sequence_batch(x, params))
            if batch:
                return "a batch of sequences (the batch stride " + batch[0] + ")"
            pid_names = names_in(pid_side)
            if any(BATCH_HEAD.search(x) for x in pid_names):
                return "a [batch, heads, seq, dim] tensor (a batch x heads index)"
            # pid * seq_len * width: a batch index times a whole sequence of rows
            sizes = {x for x in (names_in(other) | names_in(pid_side)) & runtime - ever_pids
                     if not (SMALL.search(x) or META_PARAM.search(x))}
            if len(sizes) >= 2 and any(SEQUENCE.search(x) for x in sizes):
                return "a batch of sequences (" + " x ".join(sorted(sizes)) + ")"
            wide_sib = sorted(x for x in big for p in pid_names & set(widened) for y in widened[p] if mirror(x, y))
            if wide_sib:
                return "a dimension the kernel widens to int64 for a sibling tensor (" + wide_sib[0] + ")"
            return ""

        reported: set[int] = set()

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
                            why = evidence(n, pid_side, other, big) if report else ""
                            if why and not any(id(a) in reported for a in model.ancestors(n)):
                                reported.add(id(n))  # off_bh * n * d: once, for the outer product
                                self.report(n, pid=_text(pid_side), other=_text(other), why=why)
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
