"""Kernel claims and launch sites: the part of the module model the KC1xx and KC3xx rules read.

A *kernel claim* is code presented as a kernel: a ``ModelNew`` beside a ``Model``, a registered
custom op (``torch.library.custom_op``, ``Library.impl``, ``direct_register_custom_op``), the
``forward_cuda`` of a ``CustomOp``-style class, a function under a configured kernel path, a
leaderboard-style ``custom_kernel``. ``@triton.jit`` functions are kept apart as
``model.triton_kernels``.

A *launch site* is a call that hands work to a specialised kernel: a Triton launch
``kernel[grid](...)``, a call of a kernel written in another Python DSL of the file (CuTe DSL,
TileLang, Numba, Helion: ``model.dsl_kernels``) or of what compiles or caches one, a ``torch.ops.<namespace>.<op>(...)`` call outside ``aten``, a call into an
extension built with ``load_inline``/``load``, or a call into a known kernel module
(``vllm._custom_ops``, ``sgl_kernel``, ``*._C``).

:func:`compute_calls` answers the question the KC1xx rules ask of a claim: what does its body
(and the same-module helpers it calls) hand its work to — a library op the baseline also uses,
a kernel launch, or something this file cannot see.
"""

from __future__ import annotations

import builtins
import fnmatch
import re
from functools import lru_cache
from dataclasses import dataclass, field
from typing import Iterator

import libcst as cst

from kcheck.model import SCOPES_AND_LAMBDAS, subtree, walk
from kcheck.project import DSL_DECORATORS, TRITON_DECORATORS, custom_op, is_solution_file
from kcheck.native import _BLANK, _CALLED, _function_name, _host_functions, _matching, file_host_syncs

DSL_MODULES = ("cutlass", "tilelang", "tvm", "numba", "helion", "cuda")
# What makes a DSL kernel multiply and accumulate: a GEMM or MMA call (``T.gemm``, ``cute.gemm``).
DSL_MAC = re.compile(r"gemm|mma|(^|_)dot$")

# The library ops a baseline typically already calls, by family. Keys are qualified names or
# fnmatch patterns over them; config ``library-ops`` adds more (family "configured").
LIBRARY_OPS: dict[str, str] = {
    "torch.matmul": "gemm", "torch.mm": "gemm", "torch.bmm": "gemm", "torch.addmm": "gemm",
    "torch.baddbmm": "gemm", "torch.addbmm": "gemm", "torch.einsum": "gemm", "torch.linalg.matmul": "gemm",
    "torch.nn.functional.linear": "gemm", "torch._C._nn.linear": "gemm", "torch.nn.functional.bilinear": "gemm",
    "torch.nn.Linear": "gemm", "torch.nn.Bilinear": "gemm",
    "torch.nn.functional.scaled_dot_product_attention": "attention", "torch.nn.MultiheadAttention": "attention",
    "torch.nn.functional.multi_head_attention_forward": "attention",
    "flash_attn.*": "attention", "flash_attn": "attention", "flashinfer.*": "attention",
    "xformers.ops.memory_efficient_attention*": "attention", "xformers.ops.fmha.*": "attention",
    # third-party kernel libraries: a claim whose work is their kernel hands it to the library
    "aiter.*gemm*": "gemm", "aiter.*mha*": "attention", "aiter.mla.*": "attention", "aiter.*attention*": "attention",
    "deep_gemm.*": "gemm",
    "flash_mla.*": "attention", "aiter.*": "kernel-library",
    "torch.conv*": "conv", "torch.nn.functional.conv*": "conv", "torch.nn.Conv*": "conv",
    "torch.nn.ConvTranspose*": "conv",
    # recurrent layers: cuDNN's RNN kernels (a whole sequence of gate GEMMs per call)
    **{f"torch.nn.{n}": "rnn" for n in ("LSTM", "GRU", "RNN", "LSTMCell", "GRUCell", "RNNCell")},
    **{f"torch.{n}": "rnn" for n in ("lstm", "gru", "rnn_tanh", "rnn_relu", "lstm_cell", "gru_cell")},
    **{f"torch._VF.{n}": "rnn" for n in ("lstm", "gru", "rnn_tanh", "rnn_relu", "lstm_cell", "gru_cell")},
    "torch.softmax": "softmax", "torch.log_softmax": "softmax", "torch.nn.functional.softmax": "softmax",
    "torch.nn.functional.log_softmax": "softmax", "torch.nn.Softmax": "softmax", "torch.special.softmax": "softmax",
    "torch.ops.aten.*": "aten",
    # What a kernel submission's primary compute may also hand to the library: reductions, scans,
    # sorts, linear algebra, normalisation, activations, pooling and losses (BROAD_FAMILIES).
    **{f"torch.{n}": "reduction" for n in (
        "sum", "mean", "amax", "amin", "max", "min", "prod", "std", "var", "logsumexp", "norm", "argmax",
        "argmin", "cumsum", "cumprod", "cummax", "cummin", "logcumsumexp", "nansum", "var_mean", "std_mean")},
    **{f"torch.{n}": "sort" for n in ("sort", "topk", "argsort", "kthvalue", "median", "quantile")},
    "torch.linalg.*": "linalg", "torch.cholesky*": "linalg", "torch.inverse": "linalg", "torch.det": "linalg",
    "torch.tril": "linalg", "torch.triu": "linalg", "torch.diag": "linalg", "torch.trace": "linalg",
    "torch.cdist": "linalg", "torch.cross": "linalg", "torch.outer": "gemm", "torch.dot": "gemm",
    "torch.tensordot": "gemm", "torch.kron": "gemm", "torch._scaled_mm": "gemm", "torch._scaled_grouped_mm": "gemm",
    "torch._int_mm": "gemm", "torch._grouped_mm": "gemm",
    "torch.bincount": "reduction", "torch.histc": "reduction", "torch.histogram": "reduction",
    "torch.unique": "sort", "torch.searchsorted": "sort", "torch.bucketize": "sort",
    **{f"torch.nn.functional.{n}": "norm" for n in (
        "layer_norm", "group_norm", "batch_norm", "instance_norm", "rms_norm", "normalize", "local_response_norm")},
    **{f"torch.nn.{n}": "norm" for n in (
        "LayerNorm", "GroupNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "InstanceNorm1d", "InstanceNorm2d",
        "InstanceNorm3d", "RMSNorm", "LocalResponseNorm")},
    **{f"torch.nn.functional.{n}": "activation" for n in (
        "relu", "relu6", "gelu", "silu", "mish", "sigmoid", "tanh", "softplus", "softsign", "elu", "selu", "celu",
        "leaky_relu", "hardtanh", "hardswish", "hardsigmoid", "glu", "logsigmoid", "dropout", "softmin")},
    **{f"torch.{n}": "activation" for n in (
        "relu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "erf", "clamp", "clip", "where", "abs", "pow",
        "sin", "cos", "maximum", "minimum", "log1p", "expm1", "reciprocal", "sign", "floor", "ceil", "round")},
    **{f"torch.nn.{n}": "activation" for n in (
        "ReLU", "ReLU6", "GELU", "SiLU", "Mish", "Sigmoid", "Tanh", "Softplus", "ELU", "SELU", "CELU", "LeakyReLU",
        "Hardtanh", "Hardswish", "Hardsigmoid", "GLU", "LogSigmoid", "Dropout", "Softmin", "LogSoftmax")},
    "torch.nn.functional.*pool*": "pool", "torch.nn.*Pool*": "pool", "torch.max_pool*": "pool",
    "torch.avg_pool*": "pool", "torch.adaptive_*pool*": "pool",
    "torch.nn.functional.interpolate": "pool", "torch.nn.functional.embedding": "pool",
    "torch.nn.functional.*_loss": "loss", "torch.nn.functional.cross_entropy": "loss",
    "torch.nn.functional.kl_div": "loss", "torch.nn.functional.nll_loss": "loss",
    "torch.nn.functional.binary_cross_entropy*": "loss", "torch.nn.functional.cosine_similarity": "loss",
    "torch.nn.functional.pairwise_distance": "loss", "torch.nn.*Loss": "loss",
}
# The families above that count only for a kernel *submission* (a ModelNew, a solution's Model, a
# custom_kernel): a registered op whose body is plain torch reductions or activations is an
# integration point for torch.compile more often than a claim of a new kernel.
BROAD_FAMILIES = {"reduction", "sort", "linalg", "norm", "activation", "pool", "loss"}
# Tensor methods that are the same library ops (``a.matmul(b)``, ``x.softmax(-1)``).
LIBRARY_METHODS = {"matmul": "gemm", "mm": "gemm", "bmm": "gemm", "addmm": "gemm", "baddbmm": "gemm",
                   "__matmul__": "gemm", "softmax": "softmax", "log_softmax": "softmax",
                   **{n: "reduction" for n in ("sum", "mean", "amax", "amin", "prod", "std", "var", "logsumexp",
                                               "norm", "argmax", "argmin", "cumsum", "cumprod")},
                   **{n: "sort" for n in ("sort", "topk", "argsort")},
                   **{n: "activation" for n in ("relu", "sigmoid", "tanh", "exp", "rsqrt", "sqrt", "clamp")}}
# Families heavy enough to be "the main op" next to an elementwise or data-movement kernel.
HEAVY_FAMILIES = {"gemm", "attention", "conv", "rnn", "baseline", "configured"}
# Calls that compile or trace what they are given and run the same ops: TorchScript runs a scripted
# layer's library op, Inductor keeps convolutions and RNNs on the library (``torch.compile(conv)``).
COMPILERS = ("torch.compile", "torch.jit.script", "torch.jit.trace")
# Calls into these modules do no hidden kernel work of their own (torch ops outside LIBRARY_OPS
# are elementwise or plumbing; the rest is host code).
NEUTRAL_MODULES = ("torch", "math", "numpy", "triton", "typing", "functools", "itertools", "operator",
                   "einops", "dataclasses", "collections", "os", "logging", "warnings")
# Modules whose calls launch compiled kernels.
KERNEL_MODULES = ("*_custom_ops.*", "*._C.*", "_C.*", "sgl_kernel.*", "*.sgl_kernel.*")
# tl ops that make a Triton kernel more than an elementwise or data-movement side job.
COMPUTE_TL = {"dot", "dot_scaled", "sum", "max", "min", "reduce", "argmax", "argmin", "cumsum", "cumprod",
              "associative_scan", "xor_sum", "histogram", "atomic_add", "atomic_max", "atomic_min",
              "atomic_cas", "atomic_xchg", "atomic_and", "atomic_or", "atomic_xor", "sort"}
# Library ops an extension's C++/CUDA source may call instead of a kernel of its own (ATen's
# ``at::``/``torch::`` functions, and the C++ frontend's ``torch::nn::functional::``, often ``F::``).
CUDA_LIBRARY = re.compile(r"\b(cublas\w*[Gg]emm\w*|cublasLt\w*Matmul|cublas[SDHCZ](symm|syrk|trmm)\w*|cudnn(?!Get|Set|Create|Destroy)\w*Forward\w*"
                          r"|((at|torch)::|(torch::nn::functional|\bF)::)(matmul|mm|bmm|addmm|baddbmm|linear|conv\w+"
                          r"|cudnn_convolution\w*|scaled_dot_product_attention))\s*\(")
# A kernel launch in host code: ``name<<<grid, block>>>`` (also ``name<scalar_t><<<...``).
CUDA_LAUNCH = re.compile(r"\b([A-Za-z_]\w*)\s*(?:<[^<>;(){}]*>)?\s*<<<")
CUDA_COMPUTE = re.compile(r"\bfor\s*\(|\bwhile\s*\(|atomic\w*\(|__shfl|\bmma\b|wmma|cublas|cutlass|__syncthreads")
# Registration helpers that are graph or export plumbing, not a kernel.
PLUMBING = ("register_fake", "impl_abstract", "register_autograd", "register_meta", "register_torch_dispatch",
            "register_vmap", "fake_impl", "abstract")
REFERENCE_NAME = re.compile(
    r"^(ref|reference|naive|torch|native|baseline|fake|meta)(_|$)|_(ref|reference|naive|torch|native|baseline|fake|meta)$"
)
BUILTINS = frozenset(dir(builtins))
# Dispatch keys under which a registered implementation is the op's portable fallback.
FALLBACK_KEYS = {"default", "cpu", "compositeexplicitautograd", "compositeimplicitautograd"}
# A leaderboard submission file (``submission.py``, ``submission_v2.py``).
SUBMISSION_ENTRY_FILE = re.compile(r"(^|/)submission\w*\.py$")


@dataclass
class Launch:
    """A call that hands work to a specialised kernel."""

    kind: str  # triton | dsl | torch-ops | extension | kernel-module | registry
    call: cst.Call
    name: str  # what is launched, as written (``_rms_kernel``, ``torch.ops._C.rms_norm``)
    side_job: bool = False  # known to do only elementwise or data-movement work (no dot, reduction, loop)
    library: str = ""  # an extension with no kernel of its own whose source calls this library op
    alongside: str = ""  # the library op the extension function calls beside its own launches
    entry: str = ""  # the extension's host function the call enters
    library_in: str = ""  # the host function of the extension's source that calls ``library``/``alongside``
    host_sync: str = ""  # what the extension function's host code waits on (kcheck.native), if anything
    accumulates: bool = True  # its kernels may multiply-accumulate (a dot, an MMA, ``acc += a[i] * b[j]``)


# Claims that are a benchmark task's solution: they run on the task's fixed inputs (plain tensors).
WORKLOAD_CLAIMS = ("model-new", "model-solution", "custom-kernel")


@dataclass
class Claim:
    """Code presented as a kernel, and the function that holds its compute."""

    kind: str  # model-new | custom-op | custom-op-class | kernel-path | custom-kernel
    label: str  # "ModelNew.forward", "custom op fused_gemm"
    function: cst.FunctionDef
    owner: cst.ClassDef | None = None
    baseline: cst.FunctionDef | None = None  # Model.forward, forward_native: what it claims to beat
    attrs: dict[str, tuple] = field(default_factory=dict)  # self.<attr> -> kind (see _attr_kind)
    baseline_attrs: dict[str, tuple] = field(default_factory=dict)  # the same for the baseline's class


# -- small helpers ----------------------------------------------------------------------------


def decorator_names(model, fn: cst.FunctionDef) -> list[str]:
    out = []
    for dec in fn.decorators:
        target = dec.decorator.func if type(dec.decorator) is cst.Call else dec.decorator
        out.append(model.qualname(target) or "")
    return out


def is_reference_name(name: str) -> bool:
    """``ref_*``, ``*_reference``, ``torch_*``, ``forward_native``, fake/meta impls: baselines, not kernels."""
    return bool(REFERENCE_NAME.search(name.lstrip("_")))


def library_family(name: str | None, config=None) -> str | None:
    """The library family of a qualified call name, or None."""
    if not name:
        return None
    if name in LIBRARY_OPS:
        return LIBRARY_OPS[name]
    if name.startswith("torch.ops.aten.") and name.count(".") >= 3:
        # ``torch.ops.aten.mm.default``: the ATen op under its own name is the op's family
        op = name.split(".")[3]
        return LIBRARY_OPS.get(f"torch.{op}") or LIBRARY_OPS.get(f"torch.nn.functional.{op}") or "aten"
    if name.endswith("_") and not name.endswith("__") and name[:-1] in LIBRARY_OPS:
        return LIBRARY_OPS[name[:-1]]  # the in-place form (``torch.relu_``) is the same op
    for pattern, family in LIBRARY_OPS.items():
        if "*" in pattern and fnmatch.fnmatchcase(name, pattern):
            return family
    for extra in getattr(config, "library_ops", ()) or ():
        if name == extra or fnmatch.fnmatchcase(name, extra) or name.endswith("." + extra):
            return "configured"
    return None


def _string_value(node: cst.CSTNode | None, consts: dict[str, str]) -> str | None:
    if type(node) in (cst.SimpleString, cst.ConcatenatedString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    if type(node) is cst.Name:
        return consts.get(node.value)
    if type(node) in (cst.List, cst.Tuple):
        parts = [_string_value(e.value, consts) for e in node.elements]
        return "\n".join(parts) if parts and all(p is not None for p in parts) else None
    return None


def _kwarg(call: cst.Call, name: str) -> cst.CSTNode | None:
    return next((a.value for a in call.args if a.keyword and a.keyword.value == name), None)


def _walk(root: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Pre-order walk that does not enter nested functions, classes or lambdas."""
    return subtree(root, SCOPES_AND_LAMBDAS)


# -- finding claims and launches -----------------------------------------------------------------


def find_claims(model, module: cst.Module) -> None:
    """Fill ``model.triton_kernels``, ``model.launch_sites`` and ``model.kernel_claims``."""
    for defs in model.functions.values():
        for fn in defs:
            names = decorator_names(model, fn)
            if any(name in TRITON_DECORATORS for name in names):
                model.triton_kernels.append(fn)
            elif any(name in DSL_DECORATORS for name in names):
                model.dsl_kernels.append(fn)
    consts, extensions = _module_bindings(model, module)
    _nested_extensions(model, module, consts, extensions)
    model._claim_extensions = extensions
    model._claim_module = module
    ext_attrs, ext_functions = _extension_attrs(model, module, extensions)
    _find_launches(model, module, consts, extensions, ext_attrs, ext_functions)
    _find_kernel_claims(model, module, extensions)


def _module_bindings(model, module: cst.Module) -> tuple[dict[str, str], dict[str, str | None]]:
    """Module-level string constants, and names bound to ``load_inline``/``load`` extensions
    (with their CUDA source when this file holds it)."""
    consts: dict[str, str] = {}
    extensions: dict[str, str | None] = {}
    for stmt in _module_statements(module.body):
        if type(stmt) is not cst.SimpleStatementLine:
            continue
        for small in stmt.body:
            if type(small) is not cst.Assign or len(small.targets) != 1:
                continue
            target = small.targets[0].target
            if type(target) is not cst.Name:
                continue
            text = _string_value(small.value, consts)
            if text is not None:
                consts[target.value] = text
            elif type(small.value) is cst.Call and _is_extension_build(model, small.value):
                cuda = _string_value(_kwarg(small.value, "cuda_sources"), consts)
                cpp = _string_value(_kwarg(small.value, "cpp_sources"), consts)
                # the host functions may be defined in either (a wrapper in cpp_sources, kernels in cuda_sources)
                extensions[target.value] = cuda if not cpp or cpp in (cuda or "") else (
                    cpp if cuda is None else cpp + "\n" + cuda)
    return consts, extensions


def _extension_source(model, call: cst.Call, consts: dict[str, str]) -> str | None:
    """The C++/CUDA source a ``load_inline`` call builds from (``cuda_sources`` and ``cpp_sources``,
    named through ``consts``), None when this file does not hold it as written."""
    cuda = _string_value(_kwarg(call, "cuda_sources"), consts)
    cpp = _string_value(_kwarg(call, "cpp_sources"), consts)
    # the host functions may be defined in either (a wrapper in cpp_sources, kernels in cuda_sources)
    return cuda if not cpp or cpp in (cuda or "") else (cpp if cuda is None else cpp + "\n" + cuda)


def _nested_extensions(model, module: cst.Module, consts: dict[str, str], extensions: dict) -> None:
    """Extensions built inside a function: ``global _ext; _ext = load_inline(...)`` in a lazy
    builder (a module-level name, as if built at the top), and ``self.ext = load_inline(...)`` in a
    method (recorded under ``"self.ext"``, which :func:`_extension_attrs` binds to the attribute),
    and ``Fn.kernel = load_inline(...)`` on a class of the file (under ``"Fn.kernel"``).
    Each source is read with the function's own string constants (``cuda_src = \"\"\"...\"\"\"``)."""
    for defs in model.functions.values():
        for fn in defs:
            declared = {n.name.value for node in _walk(fn.body) if type(node) is cst.Global for n in node.names}
            local: dict[str, str] | None = None
            for node in _walk(fn.body):
                if type(node) is not cst.Assign or len(node.targets) != 1 or type(node.value) is not cst.Call \
                        or not _is_extension_build(model, node.value):
                    continue
                target = node.targets[0].target
                if type(target) is cst.Name and target.value in declared:
                    key = target.value
                elif type(target) is cst.Attribute and type(target.value) is cst.Name and (
                        target.value.value in ("self", "cls") or target.value.value in model.classes):
                    key = f"{target.value.value}.{target.attr.value}"  # ``Fn.kernel = load_inline(...)`` too
                else:
                    continue
                if local is None:
                    local = dict(consts)
                    for stmt in _walk(fn.body):
                        if type(stmt) is cst.Assign and len(stmt.targets) == 1 and type(stmt.targets[0].target) is cst.Name:
                            text = _string_value(stmt.value, local)
                            if text is not None:
                                local[stmt.targets[0].target.value] = text
                if key not in extensions or extensions[key] is None:
                    extensions[key] = _extension_source(model, node.value, local)


def _module_statements(body) -> Iterator[cst.CSTNode]:
    """The module's top-level statements, with those of a top-level ``try`` (its body, handlers,
    ``else`` and ``finally``) and ``if`` in order: an extension is often built under
    ``try: ext = load_inline(...) except Exception: ext = None``."""
    for stmt in body:
        if type(stmt) is cst.Try:
            yield from _module_statements(stmt.body.body)
            for handler in stmt.handlers:
                yield from _module_statements(handler.body.body)
            for extra in (stmt.orelse, stmt.finalbody):
                if extra is not None:
                    yield from _module_statements(extra.body.body)
        elif type(stmt) is cst.If:
            yield from _module_statements(stmt.body.body)
            orelse = stmt.orelse
            if orelse is not None:
                yield from _module_statements(orelse.body.body if type(orelse) is cst.Else else [orelse])
        else:
            yield stmt


def _is_extension_build(model, call: cst.Call) -> bool:
    return (model.call_name(call) or "") in ("torch.utils.cpp_extension.load_inline", "torch.utils.cpp_extension.load")


def _extension_attrs(model, module, extensions) -> tuple[dict[str, str | None], dict[str, str]]:
    """``self.<attr>`` names bound to an extension (``self.ext = load_inline(...)``: attr -> None, or
    a module name: attr -> that name), and those bound to one of its functions
    (``self.act = ext.act_cuda``: attr -> ext)."""
    out: dict[str, str | None] = {}
    functions: dict[str, str] = {}
    if not extensions:
        return out, functions
    for node in walk(module):
        if type(node) is cst.Assign and len(node.targets) == 1:
            target = node.targets[0].target
            if type(target) is cst.Attribute and type(target.value) is cst.Name and target.value.value == "self":
                value = node.value
                if type(value) is cst.Name and value.value in extensions:
                    bound = out.setdefault(target.attr.value, value.value)
                    if bound != value.value:  # bound to two extensions: which one is unknown
                        out[target.attr.value] = None
                elif type(value) is cst.Call and _is_extension_build(model, value):
                    key = f"self.{target.attr.value}"
                    out[target.attr.value] = key if key in extensions else None
                elif type(value) is cst.Call and (built := _built_by(model, value, extensions)) is not None:
                    out.setdefault(target.attr.value, built)  # ``self.ext = _get_extension()``
                elif type(value) is cst.Attribute and type(value.value) is cst.Name and (
                    value.value.value in extensions and value.value.value not in model.imports
                ):
                    functions[target.attr.value] = f"{value.value.value}.{value.attr.value}"
    return out, functions


def _built_by(model, call: cst.Call, extensions) -> str | None:
    """The extension a same-module builder function returns (``def _get_ext(): ...; return _ext``
    with ``_ext`` an extension name), or None."""
    if type(call.func) is not cst.Name or call.func.value in model.imports:
        return None
    function = model.local_function(call.func.value)
    if function is None:
        return None
    names = {r.value.value for r in walk(function.body) if type(r) is cst.Return and type(r.value) is cst.Name}
    found = [n for n in names if n in extensions]
    return found[0] if len(found) == 1 else None


def _find_launches(model, module, consts, extensions, ext_attrs, ext_functions=None) -> None:
    local_kernels = {fn.name.value: fn for fn in model.triton_kernels}
    syncs = file_host_syncs([*consts.values(), *(s for s in extensions.values() if s)]) if extensions else {}
    side_cache: dict[int, bool] = {}
    lookups = _registry_names(model, _registries(model, module, local_kernels))
    dsl = _dsl_names(model)
    for node in model.calls:
        func = node.func
        kernels = _dsl_launched(model, node, dsl) if dsl else None
        if kernels:
            model.launch_sites[id(node)] = Launch("dsl", node, kernels[0].name.value,
                                                  accumulates=_dsl_accumulates(model, kernels, dsl))
            continue
        if lookups and type(func) is cst.Name:
            fn = model.enclosing_function(node)
            registry = lookups.get(id(fn), {}).get(func.value) if fn is not None else None
            if registry is not None:
                model.launch_sites[id(node)] = Launch("registry", node, f"a kernel from {registry}")
                continue
        if type(func) is cst.Subscript:
            base = model.dotted(func.value) or ""
            last = base.split(".")[-1]
            kernel = local_kernels.get(base)
            if kernel is not None:
                if id(kernel) not in side_cache:
                    side_cache[id(kernel)] = _triton_side_job(model, kernel)
                model.launch_sites[id(node)] = Launch("triton", node, base, side_cache[id(kernel)],
                                                      accumulates=_triton_dots(model, kernel))
            elif "kernel" in last.lower():
                model.launch_sites[id(node)] = Launch("triton", node, base)
            continue
        name = model.call_name(node) or ""
        parts = name.split(".")
        if custom_op(name):
            model.launch_sites[id(node)] = Launch("torch-ops", node, name)
        elif parts[0] in extensions and len(parts) >= 2 and parts[0] not in model.imports:
            source = extensions[parts[0]]
            model.launch_sites[id(node)] = _extension_launch(node, name, source, parts[-1], syncs.get(parts[-1], ""))
        elif len(parts) >= 3 and parts[0] != "self" and f"{parts[0]}.{parts[1]}" in extensions:
            # ``Fn.kernel.fused_kernel(...)`` of an extension stored on a class of this file
            source = extensions[f"{parts[0]}.{parts[1]}"]
            model.launch_sites[id(node)] = _extension_launch(node, name, source, parts[-1], syncs.get(parts[-1], ""))
        elif parts[0] == "self" and len(parts) >= 3 and parts[1] in ext_attrs:
            source = extensions.get(ext_attrs[parts[1]]) if ext_attrs[parts[1]] else (
                next((s for s in extensions.values() if s), None) if len(extensions) == 1 else None)
            model.launch_sites[id(node)] = _extension_launch(node, name, source, parts[-1], syncs.get(parts[-1], ""))
        elif parts[0] == "self" and len(parts) == 2 and ext_functions and parts[1] in ext_functions:
            # ``self.act = ext.act_cuda`` in __init__, ``self.act(x)`` in forward
            ext, function = ext_functions[parts[1]].split(".")
            source = extensions.get(ext)
            model.launch_sites[id(node)] = _extension_launch(node, name, source, function)
        elif (model.dotted(func) or "").split(".")[0] in model.imports and not name.startswith("torch.") and \
                in_kernel_module(name):  # torch._C is the framework's own binding, not a kernel module
            model.launch_sites[id(node)] = Launch("kernel-module", node, name)


def _dsl_names(model) -> dict[str, list[cst.FunctionDef]]:
    """Name -> the DSL kernels (``model.dsl_kernels``) it stands for: a kernel's own name, and a
    factory of one: a function that returns it or a value naming it (TileLang's ``def matmul(M, N,
    K):`` holding a ``@T.prim_func def main(...)`` and ending ``return tilelang.compile(main)``), or
    stores such a value and returns (a cache getter: ``self._cache[key] = build(M, N); return
    self._cache[key]``), through up to three such steps."""
    out: dict[str, list[cst.FunctionDef]] = {}
    for fn in model.dsl_kernels:
        out.setdefault(fn.name.value, []).append(fn)
    for _ in range(3):
        grown = False
        for name, defs in model.functions.items():
            if name in out:
                continue
            for fn in defs:
                returns = [r.value for r in walk(fn.body) if type(r) is cst.Return and r.value is not None]
                if any(type(r) is cst.Call and (type(r.func) is cst.Subscript or type(r.func) is cst.Name
                                                and r.func.value not in out) for r in returns):
                    continue  # ``return kernel(y)``: it runs what it built, a launch site, not a factory
                values = returns + [a.value for a in walk(fn.body) if type(a) is cst.Assign] if returns else []
                named = next((n for v in values for n in _dsl_mentions(v, out) if n != name), None)
                if named is not None:
                    out[name] = out[named]
                    grown = True
                    break
        if not grown:
            break
    return out


def _dsl_launched(model, call: cst.Call, dsl: dict) -> list[cst.FunctionDef]:
    """The DSL kernels a call runs: a kernel or factory called by name, or a callable bound in the
    same function (or, for ``self.<attr>``, the same class) to an expression naming one
    (``compiled = cute.compile(host_fn, ...)``, ``self.kernel = tilelang.compile(matmul(M, N, K))``,
    ``kernel = matmul(M, N, K)``)."""
    func = call.func
    if type(func) is cst.Name and func.value in dsl and func.value not in model.imports:
        return dsl[func.value]
    if type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value in ("self", "cls") \
            and func.attr.value in dsl:
        return dsl[func.attr.value]  # ``self._get_kernel(m, n)``: a method that builds or fetches one
    target = func.value if type(func) is cst.Subscript else func
    text = model.dotted(target)
    if not text or type(func) is cst.Attribute and not text.startswith("self."):
        return []
    scope = model.enclosing_function(call)
    if text.startswith("self."):
        cls = next((a for a in model.ancestors(call) if type(a) is cst.ClassDef), None)
        scope = cls if cls is not None else scope
    for node in walk(scope.body) if scope is not None else ():
        if type(node) is cst.Assign and any(model.dotted(t.target) == text or type(t.target) is cst.Subscript and
                                            model.dotted(t.target.value) == text for t in node.targets):
            named = _dsl_mentions(node.value, dsl)
            if named:
                return dsl[named[0]]
    return []


def _dsl_mentions(node: cst.CSTNode, dsl: dict) -> list[str]:
    """The names of ``dsl`` an expression mentions: as names, or as methods of ``self``/``cls``
    (``self._kernel(m, n)``), not as attributes of anything else (``F.gelu`` is not ``gelu``)."""
    skip = {id(n.attr) for n in walk(node) if type(n) is cst.Attribute
            and not (type(n.value) is cst.Name and n.value.value in ("self", "cls"))}
    return [n.value for n in walk(node) if type(n) is cst.Name and n.value in dsl and id(n) not in skip]


def _dsl_accumulates(model, kernels: list[cst.FunctionDef], dsl: dict) -> bool:
    """Whether DSL kernels (and the DSL functions they call, a host function's kernels) multiply and
    accumulate: a GEMM or MMA call, or a product added into an accumulator."""
    seen: set[int] = set()
    todo = list(kernels)
    while todo:
        fn = todo.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        for n in walk(fn.body):
            if type(n) is cst.Call:
                if DSL_MAC.search((model.dotted(n.func) or "").split(".")[-1]):
                    return True
                if type(n.func) is cst.Name and n.func.value in dsl:
                    todo += dsl[n.func.value]
            elif type(n) is cst.AugAssign and type(n.operator) is cst.AddAssign and _has_product(n.value):
                return True
            elif type(n) is cst.Assign and type(n.value) is cst.BinaryOperation and type(n.value.operator) is cst.Add \
                    and any(t.target.deep_equals(side) and _has_product(other) for t in n.targets
                            for side, other in ((n.value.left, n.value.right), (n.value.right, n.value.left))):
                return True  # ``acc[i] = acc[i] + a[k] * w[k]``
    return False


def in_kernel_module(name: str) -> bool:
    """Whether a qualified name lies in a kernel module (``*_custom_ops.*``, ``*._C.*``, ``sgl_kernel.*``)."""
    return any(fnmatch.fnmatchcase(name, p) for p in KERNEL_MODULES)


def _registries(model, module, local_kernels) -> set[str]:
    """Module-level dicts whose values are all kernels: ``{(dtype, head): torch.ops.x.y, ...}``."""
    out = set()
    for stmt in module.body:
        if type(stmt) is not cst.SimpleStatementLine:
            continue
        for small in stmt.body:
            if type(small) in (cst.Assign, cst.AnnAssign) and type(small.value) is cst.Dict and small.value.elements:
                target = small.targets[0].target if type(small) is cst.Assign else small.target
                values = [getattr(e, "value", None) for e in small.value.elements]
                if type(target) is cst.Name and all(_is_kernel_ref(model, v, local_kernels) for v in values):
                    out.add(target.value)
    return out


def _is_kernel_ref(model, node, local_kernels) -> bool:
    if type(node) not in (cst.Name, cst.Attribute):
        return False
    name = model.qualname(node) or ""
    parts = name.split(".")
    return (name in local_kernels or (name.startswith("torch.ops.") and len(parts) >= 4 and parts[2] != "aten")
            or in_kernel_module(name))


def _registry_names(model, registries) -> dict[int, dict[str, str]]:
    """Per function: local names bound to a registry lookup (``kernel = _KERNELS.get(key)``)."""
    out: dict[int, dict[str, str]] = {}
    if not registries:
        return out
    for defs in model.functions.values():
        for fn in defs:
            for node in _walk(fn.body):
                if type(node) is cst.Assign and len(node.targets) == 1 and type(node.targets[0].target) is cst.Name:
                    value = node.value
                    base = value.value if type(value) is cst.Subscript else (
                        value.func.value if type(value) is cst.Call and type(value.func) is cst.Attribute
                        and value.func.attr.value == "get" else None)
                    if type(base) is cst.Name and base.value in registries:
                        out.setdefault(id(fn), {})[node.targets[0].target.value] = base.value
    return out


def _triton_side_job(model, kernel: cst.FunctionDef) -> bool:
    """Whether a Triton kernel only moves or scales data: no loop, no ``tl.dot``, no reduction."""
    for node in _walk(kernel.body):
        if type(node) in (cst.For, cst.While):
            return False
        if type(node) is cst.Call:
            name = model.call_name(node) or ""
            if name.startswith("triton.language.") and name.split(".")[-1] in COMPUTE_TL:
                return False
            if type(node.func) is cst.Attribute and node.func.attr.value in COMPUTE_TL and not name.startswith("triton"):
                return False  # x.sum(), acc.max(): tensor-method reductions inside the kernel
    return True


def _triton_dots(model, kernel: cst.FunctionDef) -> bool:
    """Whether a Triton kernel multiplies and accumulates: ``tl.dot``/``tl.dot_scaled``, or a
    product summed into an accumulator (``acc += x * w`` in a loop over K, ``tl.sum(x * w, 1)``):
    GEMM or convolution work written without tensor cores."""
    for n in _walk(kernel.body):
        if type(n) is cst.Call:
            last = (model.call_name(n) or "").split(".")[-1]
            if last in ("dot", "dot_scaled"):
                return True
            if last == "sum" and n.args and _has_product(n.args[0].value):
                return True
        elif type(n) is cst.AugAssign and type(n.operator) is cst.AddAssign and _has_product(n.value):
            return True
    return False


def _has_product(node: cst.CSTNode) -> bool:
    """Whether an expression multiplies two loaded or computed values (not by a literal)."""
    return any(type(n) is cst.BinaryOperation and type(n.operator) is cst.Multiply
               and type(n.left) not in (cst.Integer, cst.Float) and type(n.right) not in (cst.Integer, cst.Float)
               for n in walk(node))


# Multiply-accumulate in device code: an MMA or tensor-core call, or an accumulation of a product
# with an indexed operand (``acc += a[i] * b[j]``, ``s += v * w[k]``, ``fmaf(x[i], w[j], acc)``):
# GEMM or convolution work (a sum of squares counts too: the test errs towards "real work"). A
# softmax, max or pool loop accumulates one operand (``s += expf(x[i] - m)``).
CUDA_MAC = re.compile(r"\bmma\b|wmma|cutlass|cublas|__hfma2|\+=[^;]*\][^;]*\*|\+=[^;]*\*[^;]*\["
                      r"|\bfmaf?\s*\([^;,]*\[[^;,]*,[^;,]*\[|\bfmaf?\s*\([^;,]*,[^;,]*\[[^;]*,\s*(acc|sum)\w*\s*\)")


def _kernels_accumulate(source: str | None, kernels: frozenset[str] | None = None) -> bool:
    """Whether the launched kernels (all of ``source``'s when ``kernels`` is None) and the device
    functions they call do multiply-accumulate work (:data:`CUDA_MAC`); True when a kernel is not shown."""
    if source is None:
        return True
    bodies = _device_bodies(source)
    todo = list(kernels) if kernels is not None else list(bodies)
    seen = set(todo)
    if not todo:
        return True
    while todo:
        body = bodies.get(todo.pop())
        if body is None or CUDA_MAC.search(_unindexed(body)):
            return True
        for callee in _CALLED.findall(body):
            if callee in bodies and callee not in seen:
                seen.add(callee)
                todo.append(callee)
    return False


def _unindexed(code: str) -> str:
    """``code`` with what subscripts hold emptied (``x[b * D + i]`` -> ``x[]``): index arithmetic
    is no multiplication of values."""
    for _ in range(3):
        code = re.sub(r"\[[^\[\]]*\]", "[]", code)
    return code


def _cuda_library(source: str | None) -> str:
    """The library op an extension hands its work to when its source defines no kernel
    (``__global__``) and calls one (``cublasSgemm`` in a loop is cuBLAS's GEMM): "" otherwise."""
    if source is None or "__global__" in source:
        return ""
    found = CUDA_LIBRARY.search(source)
    return found.group(1) if found else ""


def library_op_family(op: str) -> str:
    """The family of a library op an extension's C++ calls (``cudnnConvolutionForward``: conv)."""
    low = op.lower()
    if "conv" in low:
        return "conv"
    return "attention" if "attention" in low else "gemm"


@lru_cache(maxsize=256)
def _device_bodies(source: str) -> dict[str, str]:
    """``__global__``/``__device__`` function bodies of ``source`` by name (comments blanked)."""
    code = _BLANK.sub(lambda m: " " * len(m.group(0)), source)
    out: dict[str, str] = {}
    for m in re.finditer(r"\b__(global|device)__\b", code):
        brace = code.find("{", m.end())
        stop = code.find(";", m.end())
        if brace < 0 or (0 <= stop < brace):
            continue  # a declaration
        header = code[m.end():brace].replace("__launch_bounds__", " ")
        name = _function_name(re.sub(r"__\w+__\s*(\([^()]*\))?", " ", header))
        if name is not None:
            out[name] = out.get(name, "") + code[brace + 1:_matching(code, brace)]
    return out


@lru_cache(maxsize=256)
def extension_function_work(source: str, function: str) -> tuple[str, frozenset[str], str] | None:
    """What the host function ``function`` of an extension's source (and the host functions of the
    same source it calls) does: the first library op it calls (:data:`CUDA_LIBRARY`, "" if none),
    the kernels it launches (``k<<<...>>>``) and the host function that calls the library op. None
    when the source does not define it."""
    bodies = _host_functions(_BLANK.sub(lambda m: " " * len(m.group(0)), source))
    if function not in bodies:
        return None
    library, where, kernels, todo, seen = "", "", set(), [function], {function}
    while todo:
        name = todo.pop()
        body = bodies[name]
        found = CUDA_LIBRARY.search(body)
        if found and not library:
            library, where = found.group(1), name
        kernels.update(CUDA_LAUNCH.findall(body))
        for callee in _CALLED.findall(body):
            if callee in bodies and callee not in seen:
                seen.add(callee)
                todo.append(callee)
    return library, frozenset(kernels), where


def _kernels_side_job(source: str, kernels: frozenset[str]) -> bool:
    """Whether every launched kernel (and the device functions it calls) only does per-element
    work: no loop, atomic, shuffle, barrier or MMA (:data:`CUDA_COMPUTE`)."""
    bodies = _device_bodies(source)
    todo, seen = list(kernels), set(kernels)
    while todo:
        body = bodies.get(todo.pop())
        if body is None or CUDA_COMPUTE.search(_per_element_loops(body)):
            return False  # a kernel this source does not show, or one that loops
        for callee in _CALLED.findall(body):
            if callee in bodies and callee not in seen:
                seen.add(callee)
                todo.append(callee)
    return True


def _extension_launch(call: cst.Call, name: str, source: str | None, function: str, host_sync: str = "") -> Launch:
    """The launch record of a call of the extension function ``function`` built from ``source``."""
    side_job, library, alongside, where = _extension_work(source, function)
    work = extension_function_work(source, function) if source else None
    accumulates = _kernels_accumulate(source, work[1] if work is not None and work[1] else (
        None if work is None else frozenset({function})))
    return Launch("extension", call, name, side_job, library, host_sync=host_sync, alongside=alongside, entry=function,
                  library_in=where, accumulates=accumulates)


def _extension_work(source: str | None, function: str) -> tuple[bool, str, str, str]:
    """(side_job, library, alongside) of a call of ``function`` in an extension built from
    ``source``, read from that host function's own body where the source defines it: a library op
    with no launch is the whole work (``library``: a kernel written in the source but never
    launched from here does not count); a library op beside launches is the main op those kernels
    sit beside (``alongside``), and the launches are a side job when every launched kernel is.
    Where the function is not found, the whole source is read (:func:`_cuda_library`)."""
    work = extension_function_work(source, function) if source else None
    if work is None or not (work[0] or work[1]):
        return _cuda_side_job(source), _cuda_library(source), "", ""
    library, kernels, where = work
    if not kernels:
        return False, library, "", where
    return _kernels_side_job(source, kernels), "", library, where


def _cuda_side_job(source: str | None) -> bool:
    """Whether inline CUDA source only does per-element work: no loop, atomics, shuffles or MMA."""
    return source is not None and "__global__" in source and not CUDA_COMPUTE.search(_per_element_loops(source))


_FOR_HEADER = re.compile(r"\bfor\s*\(([^;()]*(?:\([^;()]*\)[^;()]*)*);([^;]*);([^;{]*?)\)\s*(?=[{\w])")
_GRID_SIZED = re.compile(r"\b([A-Za-z_]\w*)\s*=\s*[^;]*\bgridDim\b")


def _per_element_loops(code: str) -> str:
    """``code`` with the headers of loops that still do one element per step blanked: a grid-stride
    loop (it starts from the thread's index and steps by the grid's size: ``for (i = idx; i < n;
    i += blockDim.x * gridDim.x)``) and a loop over a handful of lanes (``for (j = 0; j < 4; ++j)``
    over a vector's components). What remains of a loop is real per-thread work."""
    grid_sized = set(_GRID_SIZED.findall(code))

    def blank(m: re.Match) -> str:
        init, cond, step = m.group(1), m.group(2), m.group(3)
        stepped_by = re.search(r"\+=\s*(.+)$", step.strip())
        if stepped_by and re.search(r"threadIdx|blockIdx|\b(idx|tid|index|gid|thread_id)\b", init) and (
                "gridDim" in stepped_by.group(1) or set(re.findall(r"\w+", stepped_by.group(1))) & grid_sized):
            return " " * len(m.group(0))
        bound = re.search(r"<=?\s*(\d+)\s*$", cond.strip())
        if bound and int(bound.group(1)) <= 8 and re.search(r"=\s*0\s*$", init.strip()):
            return " " * len(m.group(0))
        return m.group(0)
    return _FOR_HEADER.sub(blank, code)


def _find_kernel_claims(model, module: cst.Module, extensions) -> None:
    claimed: set[int] = set()

    def add(claim: Claim) -> None:
        if id(claim.function) not in claimed and not is_reference_name(claim.function.name.value):
            claimed.add(id(claim.function))
            model.kernel_claims.append(claim)

    classes = model.classes
    for cls in classes.values():
        methods = {s.name.value: s for s in cls.body.body if type(s) is cst.FunctionDef}
        bases = {(model.dotted(b.value) or "").split(".")[-1] for b in cls.bases}
        if cls.name.value == "ModelNew" and "forward" in methods:
            baseline_cls = classes.get("Model")
            baseline = _method(baseline_cls, "forward")
            add(Claim("model-new", "ModelNew.forward", methods["forward"], cls, baseline,
                      _class_attrs(model, cls, extensions),
                      _class_attrs(model, baseline_cls, extensions) if baseline_cls is not None else {}))
        elif cls.name.value == "Model" and "forward" in methods and "ModelNew" not in classes and (
            is_solution_file(model.path, bool(extensions or model.triton_kernels or model.dsl_kernels))
        ) and not model.config.copy_of:  # a solution dump's answer named Model (not the task's file copied)
            add(Claim("model-solution", "Model.forward (a solution)", methods["forward"], cls, None,
                      _class_attrs(model, cls, extensions)))
        elif "forward_cuda" in methods and ("CustomOp" in bases or "forward_native" in methods) and not (
            "forward_native" in methods and methods["forward_cuda"].body.deep_equals(methods["forward_native"].body)
        ):  # a forward_cuda that is forward_native word for word claims no kernel
            attrs = _class_attrs(model, cls, extensions)
            add(Claim("custom-op-class", f"{cls.name.value}.forward_cuda", methods["forward_cuda"], cls,
                      methods.get("forward_native"), attrs, attrs))
    for defs in model.functions.values():
        for fn in defs:
            kind = _registration(model, fn)
            if kind:
                add(Claim("custom-op", f"custom op {fn.name.value}", fn))
            elif fn.name.value == "custom_kernel" and model.context_of(fn) == "custom_kernel":
                add(Claim("custom-kernel", "custom_kernel", fn))
    for fn in _registered_by_call(model, module):
        add(Claim("custom-op", f"custom op {fn.name.value}", fn))
    for fn in _compiled_custom_kernel(model, module):
        add(Claim("custom-kernel", f"custom_kernel (torch.compile of {fn.name.value})", fn))
    if not model.kernel_claims and SUBMISSION_ENTRY_FILE.search(model.path):
        # a leaderboard submission whose task names other entry points (cross_entropy_forward,
        # cross_entropy_backward): its public top-level functions are what it submits
        for stmt in module.body:
            if type(stmt) is cst.FunctionDef and not stmt.name.value.startswith("_") and \
                    stmt not in model.triton_kernels:
                add(Claim("custom-kernel", f"submitted {stmt.name.value}", stmt))
    if model.config.kernel_paths and model.config.is_kernel_path(model.path):
        for defs in model.functions.values():
            for fn in defs:
                owner = model.parent(model.parent(fn)) if model.parent(fn) is not None else None
                if model.enclosing_function(fn) is None and not fn.name.value.startswith("__") and (
                    fn not in model.triton_kernels
                ):
                    cls = owner if type(owner) is cst.ClassDef else None
                    if cls is not None and cls.name.value == "Model":
                        continue
                    add(Claim("kernel-path", model.context_of(fn), fn, cls,
                              attrs=_class_attrs(model, cls, extensions) if cls is not None else {}))


def _method(cls: cst.ClassDef | None, name: str) -> cst.FunctionDef | None:
    if cls is None or type(cls.body) is not cst.IndentedBlock:
        return None
    return next((s for s in cls.body.body if type(s) is cst.FunctionDef and s.name.value == name), None)


def _registration(model, fn: cst.FunctionDef) -> bool:
    """Whether a decorator registers ``fn`` as a custom op's real implementation."""
    for dec in fn.decorators:
        node = dec.decorator
        target = node.func if type(node) is cst.Call else node
        name = model.qualname(target) or ""
        last = name.split(".")[-1]
        if any(p in name for p in PLUMBING):
            continue
        keys = [(_string_value(a.value, {}) or "").lower() for a in node.args] if type(node) is cst.Call else []
        if any(k in FALLBACK_KEYS or "meta" in k or "fake" in k for k in keys[1:] if last != "custom_op"):
            continue  # the op's default, CPU or composite implementation: the fallback, not a kernel
        if last == "custom_op" or last == "register_kernel":
            return True
        if last == "impl" and type(node) is cst.Call:
            return True
    return False


def _registered_by_call(model, module: cst.Module) -> Iterator[cst.FunctionDef]:
    """Functions registered by a call: ``lib.impl("op", fn, "CUDA")``, ``direct_register_custom_op(op_func=fn)``."""
    for node in model.calls:
        if type(node.func) not in (cst.Attribute, cst.Name):
            continue
        last = node.func.attr.value if type(node.func) is cst.Attribute else node.func.value
        target = None
        if last == "impl" and len(node.args) >= 2 and type(node.args[0].value) in (cst.SimpleString, cst.Name):
            keys = [(_string_value(a.value, {}) or "").lower() for a in node.args[2:]]
            if not any(k in FALLBACK_KEYS or "meta" in k or "fake" in k for k in keys):
                target = node.args[1].value
        elif last.endswith("register_custom_op"):
            target = _kwarg(node, "op_func")
            if target is None and len(node.args) >= 2 and not node.args[1].keyword:
                target = node.args[1].value
        if type(target) is cst.Name:
            fn = model.local_function(target.value)
            if fn is not None:
                yield fn


def _compiled_custom_kernel(model, module: cst.Module) -> Iterator[cst.FunctionDef]:
    """``custom_kernel = torch.compile(impl)`` at module level: the leaderboard entry is ``impl``."""
    for stmt in module.body:
        if type(stmt) is not cst.SimpleStatementLine:
            continue
        for small in stmt.body:
            if (type(small) is cst.Assign and len(small.targets) == 1 and type(small.targets[0].target) is cst.Name
                    and small.targets[0].target.value == "custom_kernel" and type(small.value) is cst.Call
                    and (model.call_name(small.value) or "") == "torch.compile" and small.value.args
                    and type(small.value.args[0].value) is cst.Name):
                fn = model.local_function(small.value.args[0].value.value)
                if fn is not None:
                    yield fn


def _class_attrs(model, cls: cst.ClassDef, extensions) -> dict[str, tuple]:
    """What each ``self.<attr> = ...`` in the class binds: see :func:`_attr_kind`; a container's
    ``self.<attr>.append(X(...))`` adds X's kind to it."""
    out: dict[str, tuple] = {}
    for node in walk(cls):
        if type(node) is cst.Assign and len(node.targets) == 1:
            target = node.targets[0].target
            if type(target) is cst.Attribute and type(target.value) is cst.Name and target.value.value == "self":
                layer = _moved_layer(model, node.value)
                if layer == target.attr.value:
                    # ``self.conv = self.conv.to(memory_format=...)``: still the same layer; a buffer
                    # bound elsewhere (``self.w, self.b = fold(...)``) moved to a layout is a tensor
                    out.setdefault(target.attr.value, ("neutral",))
                    continue
                if layer is not None and layer in out:  # ``self.fast = torch.compile(self.conv)``: that layer
                    out[target.attr.value] = out[layer]
                    continue
                out[target.attr.value] = _attr_kind(model, node.value, extensions)
        elif type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value == "append" \
                and node.args and type(node.func.value) is cst.Attribute and type(node.func.value.value) is cst.Name \
                and node.func.value.value.value == "self":
            kind = out.get(node.func.value.attr.value)
            value = node.args[0].value
            if type(value) is cst.Name:  # ``block = X(...); self.blocks.append(block)``
                value = _bound_in(model, value) or value
            if kind is not None and kind[0] == "container":
                out[node.func.value.attr.value] = ("container", kind[1] + (_attr_kind(model, value, extensions),))
    return out


MOVES = ("to", "cuda", "half", "float", "bfloat16", "double", "eval", "train", "requires_grad_", "contiguous")


def _moved_layer(model, value: cst.CSTNode) -> str | None:
    """The ``self.<attr>`` that ``value`` is, moved, cast or switched to eval (``self.conv.to(...)``),
    or compiled, scripted or traced (``torch.jit.trace(self.conv, x)``: the same layer's ops)."""
    while type(value) is cst.Call:
        if type(value.func) is cst.Attribute and value.func.attr.value in MOVES:
            value = value.func.value
        elif value.args and value.args[0].keyword is None and (model.call_name(value) or "") in COMPILERS:
            value = value.args[0].value
        else:
            break
    if type(value) is cst.Attribute and type(value.value) is cst.Name and value.value.value == "self":
        return value.attr.value
    return None


def _bound_in(model, name: cst.Name) -> cst.CSTNode | None:
    """The value last assigned to ``name`` in its function before this use (None if not simple)."""
    function = model.enclosing_function(name)
    found = None
    for node in walk(function.body) if function is not None else ():
        if type(node) is cst.Assign and len(node.targets) == 1 and type(node.targets[0].target) is cst.Name \
                and node.targets[0].target.value == name.value:
            found = node.value
    return found


def _bound_names(model) -> set[str] | frozenset:
    """Every name the module binds anywhere (definitions, imports, assignments, parameters, loop and
    ``with`` targets); everything when it star-imports."""
    found = getattr(model, "_claim_bound_names", None)
    if found is None:
        found = set(model.imports) | set(model.functions) | set(model.classes)
        for node in walk(model._claim_module):
            kind = type(node)
            if kind is cst.ImportStar:
                found = _EVERY_NAME
                break
            if kind is cst.Param:
                found.add(node.name.value)
            elif kind in (cst.AssignTarget, cst.For, cst.AsName, cst.CompFor, cst.NamedExpr, cst.AnnAssign,
                          cst.AugAssign):
                target = node.name if kind is cst.AsName else node.target
                found.update(n.value for n in walk(target) if type(n) is cst.Name)
            elif kind in (cst.FunctionDef, cst.ClassDef):
                found.add(node.name.value)
            elif kind is cst.Global or kind is cst.Nonlocal:
                found.update(n.name.value for n in node.names)
        model._claim_bound_names = found
    return found


class _Every(frozenset):
    def __contains__(self, item) -> bool:
        return True


_EVERY_NAME = _Every()


def _factory_result(model, call: cst.Call) -> cst.CSTNode | None:
    """What a same-module function or method returns when it has one ``return <call>`` (a layer
    factory: ``def conv_bn(i, o): return nn.Sequential(...)``, ``self._make_layer(c)``)."""
    function = model.callee(call)
    if function is None and type(call.func) is cst.Name and len(model.functions.get(call.func.value, [])) == 1:
        function = model.functions[call.func.value][0]  # a factory nested in __init__
    if function is None:
        return None
    returns = [n for n in walk(function.body) if type(n) is cst.Return]
    if len(returns) == 1 and type(returns[0].value) is cst.Call:
        return returns[0].value
    return None


def _list_items(model, name: cst.Name) -> list[cst.CSTNode]:
    """What a local list holds, from its function: ``layers = [A(), B()]``, ``layers.append(C())``,
    ``layers.extend([...])``, ``layers += [...]`` (a name bound once to a single layer counts as it)."""
    function = model.enclosing_function(name)
    items: list[cst.CSTNode] = []
    for node in walk(function.body) if function is not None else ():
        kind = type(node)
        if kind is cst.Assign and len(node.targets) == 1 and type(node.targets[0].target) is cst.Name \
                and node.targets[0].target.value == name.value:
            value = node.value
            items.extend(e.value for e in value.elements) if type(value) in (cst.List, cst.Tuple) else items.append(value)
        elif kind is cst.AugAssign and type(node.target) is cst.Name and node.target.value == name.value \
                and type(node.value) in (cst.List, cst.Tuple):
            items.extend(e.value for e in node.value.elements)
        elif kind is cst.Call and type(node.func) is cst.Attribute and type(node.func.value) is cst.Name \
                and node.func.value.value == name.value and node.args:
            if node.func.attr.value in ("append", "insert"):
                items.append(node.args[-1].value)
            elif node.func.attr.value == "extend" and type(node.args[0].value) in (cst.List, cst.Tuple):
                items.extend(e.value for e in node.args[0].value.elements)
    return [i.elt if type(i) in (cst.ListComp, cst.GeneratorExp) else i for i in items]


def _parameter_default(model, func: cst.CSTNode) -> cst.CSTNode | None:
    """The default of the enclosing function's parameter that ``func`` names, when that default is a
    class or function (``norm_layer=nn.LayerNorm``): what a layer built from the parameter is, for
    every caller that keeps the default."""
    if type(func) is not cst.Name:
        return None
    function = model.enclosing_function(func)
    if function is None:
        return None
    params = function.params
    for p in (*params.params, *params.kwonly_params):
        if p.name.value == func.value:
            return p.default if type(p.default) in (cst.Name, cst.Attribute) else None
    return None


def _parameter_argument(model, func: cst.CSTNode) -> cst.CSTNode | None:
    """The class every same-module caller passes for the enclosing function's parameter that ``func``
    names (``self._make_layer(BasicBlock, 64, 2)`` into ``def _make_layer(self, block, ...)``, where
    ``block(...)`` builds the layers): that class, when the callers agree on one name."""
    if type(func) is not cst.Name:
        return None
    function = model.enclosing_function(func)
    if function is None:
        return None
    params = [p.name.value for p in function.params.params]
    if func.value not in params and func.value not in [p.name.value for p in function.params.kwonly_params]:
        return None
    index = params.index(func.value) if func.value in params else None
    method = bool(params) and params[0] in ("self", "cls") and type(model.parent(model.parent(function))) is cst.ClassDef
    found: list[cst.CSTNode] = []
    for call in model.calls:
        if model.callee(call) is not function:
            continue
        arg = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == func.value), None)
        positional = [a.value for a in call.args if a.keyword is None and not a.star]
        at = None if index is None else index - (1 if method else 0)
        if arg is None and at is not None and 0 <= at < len(positional):
            arg = positional[at]
        if type(arg) is cst.Name and arg.value not in model.classes:
            bound = _bound_in(model, arg)  # ``block = Bottleneck`` then ``self._make_layer(block, ...)``
            arg = bound if type(bound) is cst.Name else arg
        if type(arg) is not cst.Name:
            return None  # a caller passes something else, or nothing this file shows
        found.append(arg)
    if found and len({a.value for a in found}) == 1 and found[0].value in model.classes:
        return found[0]
    return None


def module_kind(model, cls_name: str, extensions=frozenset()) -> tuple:
    """A same-module ``nn.Module`` class used as a layer: ("module", name) for the rules to follow."""
    return ("module", cls_name)


def _attr_kind(model, value: cst.CSTNode, extensions) -> tuple:
    """("library", name, family) | ("extension",) | ("neutral",) | ("unknown", text)."""
    if type(value) is cst.Name and value.value in extensions:
        return ("extension",)
    if type(value) is cst.Name:
        bound = _bound_in(model, value)  # ``conv = nn.Conv2d(...); self.conv = torch.jit.script(conv)``
        if bound is not None and type(bound) is not cst.Name:
            return _attr_kind(model, bound, extensions)
    if type(value) is cst.Call and type(value.func) is cst.Attribute and value.func.attr.value in MOVES and \
            type(value.func.value) is cst.Call:
        return _attr_kind(model, value.func.value, extensions)  # ``nn.Linear(i, o).half()``: the layer, moved
    if type(value) is cst.Call:
        default = _parameter_default(model, value.func) or _parameter_argument(model, value.func)
        if default is not None:  # ``norm_layer(dim)`` with ``norm_layer=nn.LayerNorm`` in the signature
            return _attr_kind(model, value.with_changes(func=default), extensions)
        name = model.call_name(value) or ""
        if _is_extension_build(model, value):
            return ("extension",)
        if name in COMPILERS and value.args:
            inner = value.args[0].value
            target = _compiled_target(model, value) if name == "torch.compile" else None
            if type(target) is cst.FunctionDef:
                return ("compiled", target)  # ``self._f = torch.compile(_forward)``: Inductor runs its ops
            inner_kind = _attr_kind(model, inner, extensions)
            if inner_kind[0] == "library":
                return ("library", f"{name}({inner_kind[1]})", inner_kind[2])
            inner_name = model.qualname(inner) or ""
            family = library_family(inner_name, model.config)
            if family:
                return ("library", f"{name}({inner_name})", family)
            return ("unknown", f"{name}(...)")
        if name == "Model":
            if _launches_kernels(model, "Model", extensions):
                return module_kind(model, "Model")  # a solution's Model rewritten around its kernels
            return ("library", "the baseline Model", "baseline")
        if name in model.classes:
            return module_kind(model, name)  # a layer of this module: its forward is followed
        built = _factory_result(model, value)
        if built is not None:  # ``conv_bn(c_in, c_out)`` returning ``nn.Sequential(...)``: what it builds
            return _attr_kind(model, built, extensions)
        if name.rsplit(".", 1)[-1] in ("Sequential", "ModuleList") and name.startswith("torch.nn"):
            items = [a.value for a in value.args if a.keyword is None]
            if len(items) == 1 and type(items[0]) is cst.Name:  # ``nn.ModuleList(layers)``, ``nn.Sequential(*layers)``
                items = _list_items(model, items[0])
            elif len(items) == 1 and type(items[0]) in (cst.List, cst.Tuple):
                items = [e.value for e in items[0].elements]
            elif len(items) == 1 and type(items[0]) in (cst.ListComp, cst.GeneratorExp):
                items = [items[0].elt]  # ``nn.ModuleList([Block(c) for _ in range(n)])``
            return ("container", tuple(_attr_kind(model, v, extensions) for v in items))
        family = library_family(name, model.config)
        if family:
            return ("library", name, family)
        if name.startswith("torch.ops."):
            return ("unknown", name)
        if name.split(".")[0] in ("torch", "math", "numpy") or name in BUILTINS:
            return ("neutral",)
        head = name.split(".")[0]
        if "." in name and head not in model.imports and head not in ("self", "cls") and head not in model.classes \
                and head not in model.functions:
            return ("neutral",)  # a method of a local value: ``self.static_x = x.clone()`` is a tensor
        return ("unknown", name)
    if type(value) is cst.Attribute and value.attr.value == "apply" and type(value.value) is cst.Name \
            and _method(model.classes.get(value.value.value), "forward") is not None:
        return module_kind(model, value.value.value)  # ``self.conv = ConvFunction.apply``: its forward
    name = model.qualname(value) if type(value) in (cst.Name, cst.Attribute) else None
    if name:
        family = library_family(name, model.config)
        if family:
            return ("library", name, family)
        if name.startswith("torch.ops."):
            return ("unknown", name)
        if name.split(".")[0] in model.imports or name.split(".")[0] == "self":
            return ("unknown", name)
    return ("neutral",)


# -- what a claim computes with ------------------------------------------------------------------


@dataclass
class Use:
    """One thing a claim's compute path hands work to."""

    kind: str  # library | launch | unknown
    node: cst.CSTNode  # the call (or ``@`` operation)
    via: cst.CSTNode | None  # the call in the claim's own body that led into a helper
    name: str
    family: str = ""
    launch: Launch | None = None


def _launches_kernels(model, cls_name: str, extensions) -> bool:
    """Whether the ``forward`` of this module's class ``cls_name`` (and the layers and helpers it
    reaches) launches a kernel of the file: then it is no reference baseline but part of the
    solution (a ``ModelNew`` that wraps a ``Model`` edited to call the extension)."""
    memo = model.__dict__.setdefault("_claim_launching_classes", {})
    if cls_name not in memo:
        memo[cls_name] = False  # while it is being read: a class that holds itself is no launch
        cls = model.classes.get(cls_name)
        forward = _method(cls, "forward")
        memo[cls_name] = forward is not None and any(
            u.kind == "launch" for u in compute_uses(model, forward, _class_attrs(model, cls, extensions)))
    return memo[cls_name]


def compute_uses(model, function: cst.FunctionDef, attrs: dict[str, tuple], depth: int = 3) -> list[Use]:
    """Library ops, launches and opaque calls reached from ``function``'s body, following
    same-module helpers (not reference functions or ``forward_native``) to ``depth``."""
    uses: list[Use] = []
    _visit_uses(model, attrs, function.body, None, depth, {id(function)}, uses)
    return uses


def _visit_uses(model, attrs: dict[str, tuple], root: cst.CSTNode, via, depth: int, seen: set[int],
                uses: list[Use]) -> None:
    """``compute_uses``' walk of ``root``, ``depth`` more helpers down (a module-level function: a
    nested one that calls itself is a reference cycle, which keeps the model alive)."""
    for node in _walk(root):
        if type(node) is cst.BinaryOperation and type(node.operator) is cst.MatrixMultiply:
            uses.append(Use("library", node, via, "@", "gemm"))
            continue
        if type(node) is cst.BinaryOperation and type(node.operator) in _ELEMENTWISE and _on_input(model, node):
            code = " ".join(cst.Module([]).code_for_node(node).split())
            uses.append(Use("elementwise", node, via, f"the elementwise ATen op `{code if len(code) <= 40 else code[:37] + '...'}`",
                            "elementwise"))
            continue
        if type(node) is not cst.Call:
            continue
        if id(node) not in model.launch_sites:  # a launch is classified as one, never followed into
            layer = _layer_kind(model, node, attrs)
            if layer is not None:
                _visit_layer(model, layer, node, via, depth, seen, uses)
                continue
            target = model.callee(node) or _autograd_forward(model, node) or _compiled_function(model, node)
            if target is not None:
                if is_reference_name(target.name.value) or target.name.value == "forward_native":
                    continue
                for each in _definitions(model, node, target):
                    if depth > 0 and id(each) not in seen:
                        seen.add(id(each))
                        _visit_uses(model, attrs, each.body, via or node, depth - 1, seen, uses)
                continue
        use = classify_call(model, node, attrs)
        if use is not None:
            use.via = via
            uses.append(use)
            if use.launch is not None and use.launch.alongside:  # the extension's own library op
                uses.append(Use("library", node, via, f"{use.launch.alongside}() in the extension {use.launch.name}",
                                library_op_family(use.launch.alongside)))


_ELEMENTWISE = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide, cst.Power)
# Tensor attributes and methods that give sizes, not values: arithmetic on them is index math.
_SIZE_ATTRS = {"shape", "size", "numel", "dim", "ndim", "stride", "device", "dtype", "element_size", "nelement"}
_SCALAR_ANNOTATIONS = {"int", "float", "bool", "str"}


def _on_input(model, node: cst.BinaryOperation) -> bool:
    """Whether an arithmetic operation works on an input tensor's values: one operand is a
    parameter of the function around it (not ``self``/``ctx``, not annotated as a Python scalar),
    as it is or indexed (``A * s``, ``x[:, 0] + b``), not its sizes (``x.shape[0] * 2``)."""
    fn = model.enclosing_function(node)
    if fn is None:
        return False
    params = {p.name.value for p in (*fn.params.params, *fn.params.kwonly_params)
              if p.name.value not in ("self", "ctx", "cls") and not (
                  p.annotation is not None and type(p.annotation.annotation) is cst.Name
                  and p.annotation.annotation.value in _SCALAR_ANNOTATIONS)}
    if not params:
        return False
    for anc in model.ancestors(node):  # index arithmetic: inside a subscript's slice or a size call
        if type(anc) in (cst.SubscriptElement, cst.Slice, cst.Index):
            return False
        if type(anc) in (cst.SimpleStatementLine, cst.FunctionDef):
            break
    for side in (node.left, node.right):
        while type(side) is cst.Subscript:
            side = side.value
        if type(side) is cst.Name and side.value in params:
            return True
    return False


def _definitions(model, call: cst.Call, target: cst.FunctionDef) -> list[cst.FunctionDef]:
    """Every module-level definition a bare-name call may reach: a helper defined in each branch of
    ``if torch.cuda.is_available(): try: ... except: ...`` (the extension path and the fallback)
    is any of them; otherwise the one ``callee`` resolves."""
    if type(call.func) is not cst.Name:
        return [target]
    defs = [d for d in model.functions.get(call.func.value, ())
            if not any(type(a) in (cst.ClassDef, cst.FunctionDef) for a in model.ancestors(d))]
    return defs if len(defs) > 1 and target in defs else [target]


def _compiled_target(model, value: cst.CSTNode | None, depth: int = 2) -> cst.FunctionDef | None | bool:
    """The same-module function ``value`` compiles: ``torch.compile(fn, ...)``, or a call of a
    same-module factory whose every return is that (``def _make(): ... return torch.compile(loop)``).
    False when ``value`` is something else; None for a literal ``None`` (a lazy slot not yet filled)."""
    if type(value) is cst.Name and value.value == "None":
        return None
    if type(value) is not cst.Call:
        return False
    if (model.call_name(value) or "") == "torch.compile":
        inner = value.args[0].value if value.args else None
        defs = model.functions.get(inner.value, ()) if type(inner) is cst.Name and inner.value not in model.imports else ()
        return defs[-1] if len(defs) == 1 else False
    if depth > 0 and type(value.func) is cst.Name and value.func.value not in model.imports:
        factory = model.local_function(value.func.value)
        if factory is None:
            return False
        found = {_compiled_target(model, r.value, depth - 1) for r in walk(factory.body)
                 if type(r) is cst.Return and r.value is not None and not any(
                     type(a) in (cst.FunctionDef, cst.Lambda) and a is not factory for a in model.ancestors(r))}
        found.discard(None)
        return found.pop() if len(found) == 1 and False not in found else False
    return False


def _compiled_function(model, call: cst.Call) -> cst.FunctionDef | None:
    """What a call of a module-level name bound to a compiled function runs: ``f = torch.compile(g)``
    at the top, or a lazy global filled by a factory (``global _f; if _f is None: _f = _make()``
    where ``_make`` returns ``torch.compile(loop)``). The compiled graph runs ``g``'s torch ops, so
    its body is the work; None when any binding of the name is something else."""
    func = call.func
    if type(func) is not cst.Name or func.value in model.imports or func.value in model.functions:
        return None
    memo = model.__dict__.setdefault("_claim_compiled", {})
    if func.value in memo:
        return memo[func.value]
    found: set = set()
    module = getattr(model, "_claim_module", None)
    for node in walk(module) if module is not None else ():
        if type(node) is cst.Assign and len(node.targets) == 1 and type(node.targets[0].target) is cst.Name \
                and node.targets[0].target.value == func.value:
            fn = model.enclosing_function(node)
            if fn is not None and not any(type(g) is cst.Global and func.value in {n.name.value for n in g.names}
                                          for g in walk(fn.body)):
                continue  # a local of another function
            found.add(_compiled_target(model, node.value))
    found.discard(None)
    memo[func.value] = found.pop() if len(found) == 1 and False not in found else None
    return memo[func.value]


def _global_kind(model, name: str) -> tuple:
    """What a module-level name binds, when every binding of it at the top of the module says the
    same (see :func:`_attr_kind`); ("unknown", name) otherwise."""
    memo = model.__dict__.setdefault("_claim_globals", {})
    if name not in memo:
        module = getattr(model, "_claim_module", None)
        kinds = {_attr_kind(model, small.value, frozenset()) for line in (module.body if module is not None else ())
                 if type(line) is cst.SimpleStatementLine for small in line.body
                 if type(small) is cst.Assign and len(small.targets) == 1
                 and type(small.targets[0].target) is cst.Name and small.targets[0].target.value == name}
        memo[name] = kinds.pop() if len(kinds) == 1 else ("unknown", name)
    return memo[name]


def _autograd_forward(model, call: cst.Call) -> cst.FunctionDef | None:
    """``Fn.apply(...)`` of a same-module ``torch.autograd.Function``: its ``forward``, where the
    work is (agents wrap a library call in one as often as a kernel)."""
    func = call.func
    if type(func) is not cst.Attribute or func.attr.value != "apply" or type(func.value) is not cst.Name:
        return None
    return _method(model.classes.get(func.value.value), "forward")


def _layer_kind(model, call: cst.Call, attrs: dict[str, tuple]) -> tuple | None:
    """The kind of a layer called as ``self.layer(x)``, ``self.layers[i](x)`` or ``block(x)`` in
    ``for block in self.layers:``, when it is one of this module's classes or a container."""
    func = call.func
    if type(func) is cst.Subscript:
        func = func.value
    if type(func) is cst.Name:  # ``for block in self.blocks: x = block(x)``
        cls = _instance_of(model, call, func.value)
        if cls is not None:  # ``m = TriMul(dim).to(x.device)`` then ``m(x)``
            return ("module", cls)
        for anc in model.ancestors(call):
            if type(anc) is not cst.For:
                continue
            if type(anc.target) is cst.Name and anc.target.value == func.value:
                func = anc.iter
                break
            # ``for i, block in enumerate(self.blocks):``
            if type(anc.target) is cst.Tuple and len(anc.target.elements) == 2 and type(anc.iter) is cst.Call \
                    and type(anc.iter.func) is cst.Name and anc.iter.func.value == "enumerate" and anc.iter.args \
                    and type(anc.target.elements[1].value) is cst.Name and anc.target.elements[1].value.value == func.value:
                func = anc.iter.args[0].value
                break
        else:
            return None
    if type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value == "self":
        kind = attrs.get(func.attr.value)
        if kind is not None and kind[0] in ("module", "container", "compiled"):
            return kind
    return None


def _instance_of(model, call: cst.Call, name: str) -> str | None:
    """The module class of this file that ``name`` is bound to in the function around ``call``
    (``m = Cls(...)``, also through ``.to(...)``/``.cuda()``/``.eval()``), or None."""
    fn = model.enclosing_function(call)
    if fn is None:
        return None
    for node in _walk(fn.body):
        if type(node) is not cst.Assign or len(node.targets) != 1 or type(node.targets[0].target) is not cst.Name \
                or node.targets[0].target.value != name:
            continue
        value = node.value
        while type(value) is cst.Call and type(value.func) is cst.Attribute and value.func.attr.value in (
                "to", "cuda", "eval", "half", "float", "bfloat16", "requires_grad_"):
            value = value.func.value
        if type(value) is cst.Call and type(value.func) is cst.Name and _method(model.classes.get(value.func.value), "forward"):
            return value.func.value
    return None


def _visit_layer(model, kind: tuple, call: cst.Call, via, depth: int, seen: set[int], uses: list) -> None:
    """A layer's work: a container's layers in turn, a module class's ``forward`` with its attributes."""
    if kind[0] == "container":
        for item in kind[1]:
            _visit_layer(model, item, call, via, depth, seen, uses)
    elif kind[0] == "module":
        cls = model.classes.get(kind[1])
        forward = _method(cls, "forward") if cls is not None else None
        if forward is None:
            uses.append(Use("unknown", call, via, kind[1]))
        elif id(forward) not in seen:  # a layer of this module, however deep it nests (seen ends cycles)
            seen.add(id(forward))
            _visit_uses(model, _class_attrs(model, cls, _extensions(model)), forward.body, via or call,
                        max(depth, 1), seen, uses)
    elif kind[0] == "compiled":
        if id(kind[1]) not in seen:  # a same-module function compiled by torch.compile: its ops are the work
            seen.add(id(kind[1]))
            _visit_uses(model, {}, kind[1].body, via or call, max(depth, 1), seen, uses)
    elif kind[0] == "library":
        uses.append(Use("library", call, via, kind[1], kind[2]))
    elif kind[0] in ("unknown", "extension"):
        uses.append(Use("unknown", call, via, kind[1] if len(kind) > 1 else "an extension"))


def unlaunched_builds(model) -> list[tuple[cst.CSTNode, str]]:
    """(statement, name) of each inline extension the module builds at its top level
    (``ext = load_inline(...)``) and never launches anywhere in the file: a kernel written and left
    beside the library ops that do the work."""
    launched = {launch.name.split(".")[0] for launch in model.launch_sites.values()}
    module = getattr(model, "_claim_module", None)
    out = []
    for stmt in module.body if module is not None else ():
        if type(stmt) is not cst.SimpleStatementLine:
            continue
        for small in stmt.body:
            if type(small) is cst.Assign and len(small.targets) == 1 and type(small.targets[0].target) is cst.Name \
                    and type(small.value) is cst.Call and _is_extension_build(model, small.value):
                name = small.targets[0].target.value
                if name not in launched:
                    out.append((stmt, name))
    return out


def _extensions(model) -> dict:
    return getattr(model, "_claim_extensions", {})


def classify_call(model, call: cst.Call, attrs: dict[str, tuple]) -> Use | None:
    """A :class:`Use` for a call that is a library op, a launch, or opaque; None for plumbing."""
    launch = model.launch_sites.get(id(call))
    if launch is not None:
        if launch.library:  # an extension whose source only calls cuBLAS/cuDNN/ATen
            return Use("library", call, None, f"{launch.library}() in the extension {launch.name}",
                       library_op_family(launch.library))
        return Use("launch", call, None, launch.name, launch=launch)
    func = call.func
    if type(func) is cst.Call and (model.call_name(func) or "") == "torch.compile" and func.args:
        inner = model.qualname(func.args[0].value) or ""
        family = library_family(inner, model.config)
        if family:
            return Use("library", call, None, f"torch.compile({inner})", family)
        return Use("unknown", call, None, "torch.compile(...)")
    name = model.call_name(call)
    raw = model.dotted(func)
    if name is None or raw is None:
        return None
    family = library_family(name, model.config)
    if family:
        return Use("library", call, None, name, family)
    op = model.qualname(call.args[0].value) if call.args and type(call.args[0].value) is cst.Attribute else None
    if op and op.startswith("torch.ops.aten.") and name.startswith("torch."):
        # a torch wrapper handed an ATen op to run (``out_dtype(torch.ops.aten.mm.default, torch.int32, a, b)``)
        return Use("library", call, None, op, library_family(op, model.config) or "aten")
    parts = raw.split(".")
    head = parts[0].removesuffix("()")
    if head == "self" and len(parts) >= 2:
        kind = attrs.get(parts[1])
        if kind is None:
            return Use("unknown", call, None, raw) if len(parts) == 2 else None
        if kind[0] == "library" and (len(parts) == 2 or parts[2] in ("forward", "__call__")):
            return Use("library", call, None, kind[1], kind[2])
        if kind[0] in ("unknown", "extension"):
            return Use("unknown", call, None, raw)
        return _method_use(call, parts[-1])
    if head in model.imports:
        if name.split(".")[0] in NEUTRAL_MODULES or model.dsl_kernels and name.split(".")[0] in DSL_MODULES:
            return None  # ``from_dlpack(x)``, ``cute.compile(fn, ...)`` beside the file's DSL kernels: plumbing
        return Use("unknown", call, None, name)
    if len(parts) == 1:
        if head in BUILTINS or head in model.classes or head not in _bound_names(model):
            return None  # a builtin, a class of this module, or a name nothing binds (a NameError, no kernel)
        kind = _global_kind(model, head)
        if kind[0] == "library":  # ``_mm = torch.compile(torch.matmul)`` at the top, then ``_mm(a, b)``
            return Use("library", call, None, kind[1], kind[2])
        return Use("unknown", call, None, name)
    return _method_use(call, parts[-1])


def _method_use(call: cst.Call, method: str) -> Use | None:
    family = LIBRARY_METHODS.get(method) or (
        LIBRARY_METHODS.get(method[:-1]) if method.endswith("_") and not method.endswith("__") else None)
    return Use("library", call, None, f".{method}()", family) if family else None


def families(uses: list[Use]) -> set[str]:
    return {u.family for u in uses if u.kind == "library"}
