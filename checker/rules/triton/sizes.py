"""What names and launches say about the sizes a Triton kernel addresses, for KC502:
which sizes stay small in serving and training (heads, experts, top-k, per-row
statistics), which tensors reach 2^31 elements (KV caches and pools, vocabulary-wide logits),
which stride names show a batch entry holding a whole sequence, and which program ids run over
batch x heads. Names are evidence here, read beside what the module's launches pass; nothing is
run.
"""

from __future__ import annotations

import re

import libcst as cst

from kcheck.rules.triton import META_PARAM

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
# Tensors that reach 2^31 elements whatever one forward's token count: KV caches and cache pools
# (every layer's pages of every live request), and vocabulary-wide logits (tokens x vocab). Rotary
# caches (cos/sin) are small tables, not KV caches.
CACHE_TENSOR = re.compile(r"kv_cache|k_cache|v_cache|key_cache|value_cache|kv_buffer|k_buffer|v_buffer"
                          r"|kv_pool|kv_data|paged_?kv|(^|_)(kv|k|v)?_?cache(_|$)|(^|_)pool(_|$)", re.IGNORECASE)
LOGITS_TENSOR = re.compile(r"logit|vocab|lm_head", re.IGNORECASE)
# An index over the requests of a batch (``req_idx``, ``request``): a serving batch holds at most
# the engine's request cap (a few thousand), so one logits row per request stays below 2^31.
REQUEST = re.compile(r"(^|_)req(uest)?s?(_|$)|^req_?(idx|id|index)$", re.IGNORECASE)
ROTARY = re.compile(r"cos|sin|rope|rotary|freq|inv_freq", re.IGNORECASE)
# A program id over batch x heads (``off_bh``, ``i_bh``, ``off_hz``, ``pid_bh``): a step of it skips
# one head's whole sequence, so the product spans a [batch, heads, seq, dim] tensor.
BATCH_HEAD = re.compile(r"(^|_)(bh|hb|hz|zh|bnh|bhz)$", re.IGNORECASE)
# Tensors a few values wide per token or request: router outputs, draft and sampling tables,
# positions and sequence lengths, and per-row statistics.
SMALL_TENSOR = re.compile(r"gating|router|expert|topk|top_k|draft|accept|bonus|candidate|position|seq_?len"
                          r"|req_to|token_ids?$|_ids?(_|$)|indptr|mask|scale|idx|ind(ex|ices)"
                          r"|^d[wb](_|$)"  # dW/dB: per-program partial gradient buffers
                          # per-row statistics: one value per (batch, head, query row)
                          r"|lse|rstd|log2?_?sum|(^|_)(mean|delta|m_i|l_i|stats?)(_|$)", re.IGNORECASE)
# Sequence lengths: a pid multiplied by one indexes the rows of a whole batch of sequences.
SEQUENCE = re.compile(r"seq|len$|_len_|tokens|^[TL]$", re.IGNORECASE)
# Kernels of routing, sampling, speculative decoding and attention metadata: they address
# per-token or per-request tables a few values wide.
SMALL_KERNEL = re.compile(r"routing|router|gating|_gate_?kernel|topk|top_k|sampl|spec|draft|verify|metadata|accept"
                          r"|reject|temb|dt_|_dt|cumsum|state_passing|lse|combine|stage2|reduce|decode|update|replay",
                          re.IGNORECASE)
# Files of speculative decoding, sampling and decode-step state updates: per-request tensors.
SMALL_FILE = re.compile(r"speculative|sampling|sampler|/spec|state_update", re.IGNORECASE)
# The number of query tokens each request brings to a decode step: a program id over requests
# times it (``rows = request * DECODE_QUERY_LEN + q``) indexes the rows of a decode batch.
DECODE_QUERY = re.compile(r"decode_?(query_?|q_?)?len(gth)?$|(query|queries|tokens)_per_req(uest)?$", re.IGNORECASE)
def strides(constexprs: set[str]) -> set[str]:
    """The ``tl.constexpr`` parameters that are strides or sizes, not block sizes: lower-case names
    (``stride_xm: tl.constexpr``, ``hidden_size: tl.constexpr``) and upper-case ones naming a
    stride. A compile-time integer that fits in 32 bits is an int32 in the product, which wraps
    the same way a runtime stride does."""
    return {c for c in constexprs if (c != c.upper() or "STRIDE" in c) and not META_PARAM.search(c)}


def sequence_batch(stride: str, params) -> bool:
    """``stride_vb`` beside ``stride_vt`` and ``stride_vh`` (also ``stride_x_batch`` beside
    ``stride_x_seqlen``, ``stride_b`` beside ``stride_s``, and the attention naming where the batch
    is ``z`` and the query and key rows are ``m`` and ``n``: ``stride_qz``, ``stride_qh``,
    ``stride_qm``): each batch entry holds a whole sequence of per-head vectors, so the batch
    stride is tokens x heads x features."""
    m = re.fullmatch(r"stride_([a-z0-9]*?)_?(b|batch|z)", stride, re.IGNORECASE)
    if not m:
        return False
    stem = "stride_" + m.group(1)
    sibs = {p[len(stem):].lstrip("_").lower() for p in params if p.startswith(stem) and p != stride}
    return any(re.fullmatch(r"t|s|l|m|n|seq|seqlen|seq_len|len|tok|tokens?", s) for s in sibs) and \
        any(s[:1] == "h" for s in sibs)


def one_token_batch(stride: str, params) -> bool:
    """``stride_vb`` of a tensor whose only other strides are heads and features (no
    ``stride_vt``/``stride_vs``): one token per batch entry, as in a decode step."""
    m = re.fullmatch(r"stride_([a-z0-9]+?)_?b", stride)
    if not m:
        return False
    sibs = {p[len("stride_"):].lstrip("_")[len(m.group(1)):].lstrip("_") for p in params
            if p.startswith("stride_" + m.group(1)) or p.startswith("stride_" + m.group(1) + "_")}
    return bool(sibs - {"b"}) and not any(s[:1] in ("t", "s", "n", "l", "m", "r") for s in sibs - {"b"})


def mirror(a: str, b: str) -> bool:
    """Two strides of the same dimension of sibling tensors: ``stride_on`` and ``stride_qn``,
    ``o_stride_t`` and ``q_stride_t``."""
    def dim(s: str) -> str:
        m = re.fullmatch(r"stride_?[a-z]+?_?([a-z0-9]+)|[a-z]+?_?stride_?([a-z0-9]+)", s, re.IGNORECASE)
        return (m.group(1) or m.group(2)) if m else ""
    return a != b and dim(a) != "" and dim(a) == dim(b)


# Names of problem dimensions a module may pin at module level (``B = 2``, ``seq_len = 1024``).
DIM_NAME = re.compile(r"^[BTHKVDLMNSCE]$|^(HV|HK|HQ|BS)$|batch|seq|len$|tokens|heads|dim$|hidden|vocab|width|channels",
                      re.IGNORECASE)
PINNED_BATCH = re.compile(r"^[BTLS]$|batch|seq|len$|tokens", re.IGNORECASE)


def pinned_elements(module: cst.Module) -> int | None:
    """The product of the problem dimensions the module pins as module-level integer constants
    (``B = 2``, ``T = 1024``, ``H = 8``, ``K = 128``: a benchmark task's shapes), when it pins a
    batch or sequence size and at least one more; None when it pins none. Every tensor the file's
    kernels address is at most that large, give or take a repeated dimension."""
    dims: dict[str, int] = {}
    for stmt in module.body:
        if type(stmt) is not cst.SimpleStatementLine:
            continue
        for small in stmt.body:
            if type(small) is cst.Assign and len(small.targets) == 1 and type(small.targets[0].target) is cst.Name \
                    and type(small.value) is cst.Integer:
                name = small.targets[0].target.value
                if DIM_NAME.search(name) and not re.search(r"BLOCK|TILE|WARP|STAGE", name):
                    dims[name] = int(small.value.evaluated_value)
    if len(dims) < 2 or not any(PINNED_BATCH.search(n) for n in dims):
        return None
    total = 1
    for v in dims.values():
        total *= max(v, 1)
    return total
