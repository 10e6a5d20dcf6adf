"""What names and launches say about the sizes a Triton kernel addresses, for KC502:
which sizes stay small in serving and training (heads, experts, top-k, per-row
statistics), which tensors reach 2^31 elements (logits, KV caches, hidden states), which stride
names show a batch entry holding a whole sequence, and when a norm kernel's rows are feature
vectors or a low-rank latent. Names are evidence here, read beside what the module's launches
pass; nothing is run.
"""

from __future__ import annotations

import re

import libcst as cst

from kcheck.rules.triton import META_PARAM, names_in, nodes_under, tl_op
from kcheck.rules.triton.launches import launch_words

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
# Tensors that reach 2^31 elements in serving or training: vocabulary logits, KV caches and
# pools, hidden states and embeddings.
LARGE_TENSOR = re.compile(r"logit|vocab|kv_cache|k_cache|v_cache|key_cache|value_cache|kv_buffer|k_buffer|v_buffer"
                          r"|kv_pool|lm_head|hidden|embed", re.IGNORECASE)
# Tensors a few values wide per token or request: router outputs, draft and sampling tables,
# positions and sequence lengths.
SMALL_TENSOR = re.compile(r"gating|router|expert|topk|top_k|draft|accept|bonus|candidate|position|seq_?len"
                          r"|req_to|token_ids?$|_ids?(_|$)|indptr|mask|scale|idx|ind(ex|ices)"
                          r"|^d[wb](_|$)", re.IGNORECASE)  # dW/dB: per-program partial gradient buffers
# Sequence lengths: a pid multiplied by one indexes the rows of a whole batch of sequences.
SEQUENCE = re.compile(r"seq|len$|_len_|tokens|^[TL]$", re.IGNORECASE)
# Per-feature parameters of a normalisation or affine row op.
WEIGHT = re.compile(r"^(w|gamma|beta)(_ptr)?$|weight", re.IGNORECASE)
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
# Names of a model's low-rank latent width (MLA's q_lora_rank and kv_lora_rank)...
LATENT_WIDTH = re.compile(r"lora_rank|low_?rank|latent_(dim|size|rank|width)", re.IGNORECASE)
# ...and a docstring saying the kernels serve multi-head latent attention, whose norms (q_a, kv_a)
# run over those latents.
LATENT_DOC = re.compile(r"\bMLA\b|multi-head latent attention|lora_rank", re.IGNORECASE)


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


def latent_rows(model, k, module: cst.Module) -> bool:
    """The file shows a norm kernel's rows are a model's low-rank latent (hundreds to ~1.5k
    values: MLA's q_lora_rank, kv_lora_rank), not hidden states: the module's launches pass a
    latent width (``kv_lora_rank``), or the module's or the kernel's docstring says the kernels
    serve multi-head latent attention. Such rows reach 2^31 only with millions of tokens in one
    forward, past a serving step's token budget and the model's context length."""
    if any(LATENT_WIDTH.search(w) for words in launch_words(model, k).values() for w in words):
        return True
    docs = (module.get_docstring(), k.fn.get_docstring())
    return any(d and LATENT_DOC.search(d) for d in docs)


def feature_rows(model, k) -> bool:
    """A normalisation kernel (``norm`` in its name) that loads a per-feature weight
    (``tl.load(W + cols)``: a parameter named like a weight, offset by no program id): the
    rows it addresses are feature vectors (hidden states, per-head q/k), tokens x features."""
    if "norm" not in k.name.lower():
        return False
    for call in k.calls(model, "load"):
        if not call.args:
            continue
        addr = call.args[0].value
        ptrs = names_in(addr) & set(k.params)
        if any(WEIGHT.search(p) for p in ptrs) and not any(
                type(n) is cst.Call and tl_op(model, n) == "program_id" for n in nodes_under(addr)):
            return True
    return False
