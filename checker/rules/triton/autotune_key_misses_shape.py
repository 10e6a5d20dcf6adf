from __future__ import annotations


import libcst as cst

from kcheck.rule import Rule
from kcheck.rules.triton import (
    META_PARAM, TRITON_TEXT, arg, kernels, names_in, nodes_under, tl_op,
)


class AutotuneKeyMissesShape(Rule):
    """`@triton.autotune` with no key, or a key that names none of the dimensions it tiles.

    ## What it does
    Finds `@triton.autotune` decorators whose `key` is missing or empty, and those whose key
    names none of the runtime sizes that its block sizes tile: the sizes compared against
    `tl.arange(0, BLOCK...)` offsets in masks, and the bounds of loops stepping by a block. The
    block sizes are the names set in the `triton.Config` dictionaries and the `BLOCK...`
    constexpr parameters. A key on a `tl.constexpr` size (a head dim `D` when the flattened
    token dimension is deliberately left out) and a key argument the kernel body never reads
    (a bucketed token count passed only for the autotuner) count as keys over the shape: the
    catalog advises against re-tuning for every token count.

    A single config tunes nothing (the autotuner runs it as it is), whatever the key.

    A block larger than the dimension is only safe with masks; an unmasked access over a tuned
    block is reported by KC501.

    ## Why is this bad?
    The autotuner picks a config once per distinct value of the key. With no key over the
    shapes, the config tuned on the first call (a warm-up shape, or a decode batch of one) is
    used for every later shape, including ones where it is slow or where its block is larger
    than the dimension. Key on the sizes that change the best config (hidden size, head dim, a
    bucketed token count), not on nothing.

    ## Example
    ```python
    @triton.autotune(configs=[triton.Config({"BLOCK": 1024}), triton.Config({"BLOCK": 4096})], key=[])
    @triton.jit
    def k(x_ptr, n_cols, BLOCK: tl.constexpr):
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + cols, mask=cols < n_cols)
    ```

    ## Use instead
    ```python
    @triton.autotune(configs=[triton.Config({"BLOCK": 1024}), triton.Config({"BLOCK": 4096})], key=["n_cols"])
    @triton.jit
    def k(x_ptr, n_cols, BLOCK: tl.constexpr):
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + cols, mask=cols < n_cols)
    ```
    """

    CODE = "KC505"
    NAME = "autotune-key-misses-shape"
    MESSAGE = "@triton.autotune on {kernel}() {what}: the config tuned for the first shape is reused for every other"
    SEVERITY = "warning"
    PREVIEW = True  # below the bar on the test split: benchmarks/results/evaluation-test.md
    KNOWLEDGE = ("triton-cuda/autotune-keys",)
    VALID = [
        """
import triton
import triton.language as tl
@triton.autotune(configs=[triton.Config({"BM": 16}, num_warps=16)], key=[])
@triton.jit
def k(x_ptr, n, BM: tl.constexpr):
    offs = tl.program_id(0) * BM + tl.arange(0, BM)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
""",
        """
import triton
import triton.language as tl
@triton.autotune(configs=[triton.Config({"BLOCK_N": 64}), triton.Config({"BLOCK_N": 128})], key=["N", "K"])
@triton.jit
def k(x_ptr, M, N, K, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    for k in range(0, K, BLOCK_K):
        x = tl.load(x_ptr + offs_n, mask=offs_n < N)
""",
        """
import triton
import triton.language as tl
@triton.autotune(configs=get_configs(), key=KEYS)
@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    pass
""",
    ]
    INVALID = [
        """
import triton
import triton.language as tl
@triton.autotune(configs=[triton.Config({"BLOCK": 256}, num_warps=4), triton.Config({"BLOCK": 512}, num_warps=8)], key=[])
@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    pass
""",
        """
import triton
import triton.language as tl
@triton.autotune(configs=[triton.Config({"BLOCK_SIZE": b}) for b in (512, 1024, 2048)], key=["eps"])
@triton.jit
def rms(x_ptr, w_ptr, n_cols, eps, BLOCK_SIZE: tl.constexpr):
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    y = x * tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
""",
    ]
    PREFILTER = (TRITON_TEXT, r"autotune")
    NEEDS = ("autotuned kernel",)

    def leave_Module(self, original_node: cst.Module) -> None:
        model = self.model
        for k in kernels(model):
            for dec in k.fn.decorators:
                call = dec.decorator
                if type(call) is cst.Call and (model.qualname(call.func) or "") in ("triton.autotune", "autotune"):
                    self._check(k, call)

    def _check(self, k, call: cst.Call) -> None:
        configs = arg(call, 0, "configs")
        if type(configs) in (cst.List, cst.Tuple) and len(configs.elements) == 1 and type(configs.elements[0]) is cst.Element:
            return  # one config: nothing is tuned, so no key can matter
        key = arg(call, 1, "key")
        if key is None:
            self.report(call, kernel=k.name, what="has no key")
            return
        if type(key) not in (cst.List, cst.Tuple):
            return  # a key built elsewhere: not ours to judge
        keys = {e.value.evaluated_value for e in key.elements if type(e.value) is cst.SimpleString}
        if not key.elements:
            self.report(call, kernel=k.name, what="has an empty key")
            return
        tuned = self._tuned(k, arg(call, 0, "configs"))
        dims = self._tiled_dims(k, tuned | {p for p in k.constexprs if META_PARAM.search(p)})
        used = names_in(k.fn.body)
        proxies = {key for key in keys if key in k.runtime_params() and key not in used}  # e.g. a token bucket
        if dims and not keys & (dims | k.constexprs) and not proxies:
            self.report(call, kernel=k.name,
                        what=f"keys on {sorted(keys)} but not on the sizes its blocks tile ({', '.join(sorted(dims))})")

    def _tuned(self, k, configs) -> set[str]:
        tuned: set[str] = set()
        if configs is not None:
            for node in nodes_under(configs):
                if type(node) is cst.Dict:
                    tuned |= {e.key.evaluated_value for e in node.elements
                              if type(e) is cst.DictElement and type(e.key) is cst.SimpleString}
        tuned &= k.constexprs
        return tuned or {p for p in k.constexprs if META_PARAM.search(p)}

    def _tiled_dims(self, k, tuned: set[str]) -> set[str]:
        model = self.model
        runtime = k.runtime_params()
        blocked: set[str] = set()  # names carrying tl.arange over a tuned block
        for _ in range(3):
            for name, value, _stmt in k.assigns:
                for n in nodes_under(value):
                    if (type(n) is cst.Call and tl_op(model, n) == "arange" and names_in(n) & tuned) or (
                            type(n) is cst.Name and n.value in blocked):
                        blocked.add(name)
                        break
        dims: set[str] = set()
        for node in nodes_under(k.fn.body):
            if type(node) is cst.Comparison and names_in(node.left) & (blocked | tuned):
                for target in node.comparisons:
                    dims |= names_in(target.comparator) & runtime
            elif type(node) is cst.Call and (
                    (type(node.func) is cst.Name and node.func.value == "range") or tl_op(model, node) in (
                        "range", "cdiv")):
                args = [a.value for a in node.args]
                if any(names_in(a) & tuned for a in args[1:] or args):
                    dims |= set().union(*(names_in(a) for a in args)) & runtime
        return dims


