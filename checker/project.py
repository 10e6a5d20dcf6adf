"""The project index: which functions run every serving step, across modules, and why.

A per-step function is one reachable from an entry point — a function whose name the
configuration lists as a per-step hot path (``forward``, ``decode_step``, ``execute_model``, ...),
or one that launches a kernel (``op_kernel``: a kernel library's op runs on every call) — through
calls the index can resolve: a same-module function, a method of the same class (``self.m()``), a
function imported from another module of the project (``from .ops import f``; ``import pkg.ops as
ops; ops.f()``). The walk does not enter one-time work (``__init__``,
weight loading, graph capture, warm-up, profiling runs, calibration, export), tests or
benchmarks, and stops after a few calls.

Phase one reads each file once with ``ast`` into :class:`FileFacts` (small, picklable, keyed by
content by the caller; a large file a chunk of top-level statements at a time,
:mod:`kcheck.chunks`); phase two, :func:`per_step`, is a breadth-first walk over all of them. The
result maps a file to its per-step functions, each with the chain that reached it, so a finding can
say why its function counts as per-step. The checker never imports the code it reads.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import io
import os
import pickle
import re
import stat
import tokenize
import warnings
from collections import Counter, deque
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace

from kcheck import chunks, contracts
from kcheck.config import hot_path_matcher
from kcheck.gate import ast_children, ast_nodes, dotted, import_bindings
from kcheck.values import HOST_NAME

# One-time work: never a per-step path, whatever calls it.
# One-time and periodic work: never a per-step path, whatever calls it (set-up, weight loading,
# graph capture, warm-up, profiling runs, calibration, export; expert rebalancing, which an engine
# runs every few thousand steps).
# what reads a clock: a host timer (read twice a window) or a benchmark timer
HOST_TIMERS = {
    "time.perf_counter", "time.perf_counter_ns", "time.time", "time.time_ns", "time.monotonic",
    "time.monotonic_ns", "timeit.default_timer",
}
BENCH_TIMERS = {"do_bench", "do_bench_cudagraph", "bench_gpu_time", "benchmark_fn"}
ONE_TIME = re.compile(
    r"^(__init__|__post_init__|_?init_(?!forward_metadata)\w*|_?load\w*|\w*_weights?|_?capture\w*|\w*cuda_graphs?\w*|_?warm_?up\w*"
    r"|profile_run|_?dummy_run|\w*calibrat\w*|\w*amax\w*|_?export\w*|_?initiali[sz]e\w*|_?setup\w*|_?compile\w*"
    r"|_?determine_available_memory|_?allocate\w*|_?build_model\w*|_?rearrange\w*|_?rebalanc\w*"
    r"|process_weights\w*|\w*_after_loading|\w*onnx\w*)$")
# Code for another platform than CUDA GPUs: Apple's Metal and MLX, TPUs, Neuron, Gaudi, Ascend.
OTHER_PLATFORM = re.compile(r"(^|/)_?(metal|mlx|mps|tpu|xla|neuron|hpu|gaudi|npu|ascend|xpu)(/|_[^/]*\.py$|\.py$)")
# Not serving steps: tests, benchmarks, evaluation harnesses, examples, scripts; and input processing, which runs once per
# request (tokenizers, multimodal processors), usually on the CPU.
TEST_PATH = re.compile(r"(^|/)(tests?|testing)/|(^|/)(test_[^/]*|[^/]*_test|conftest)\.py$")
NOT_SERVING_PATH = re.compile(
    TEST_PATH.pattern + r"|(^|/)(benchmarks?|bench[^/]*|examples?|scripts?|tools?|docs?|processors?|tokenizers?"
    r"|evaluation|evals?)/")
MAX_DEPTH = 4
ENTRY = "a per-step entry point"
# A test for a backend other than CUDA GPUs (``if _is_cpu:``, ``current_platform.is_npu()``): what
# its branch calls is that backend's path, not the GPU's step.
OTHER_BACKEND = re.compile(r"^_?is_(npu|xpu|cpu|hpu|mps|musa|mlu|tpu)$")
# Devices and backends other than CUDA GPUs, as a string names them (``x.device.type == "mps"``,
# ``SYSTEM == "ipex"``).
OTHER_DEVICES = frozenset({"cpu", "npu", "xpu", "hpu", "mps", "meta", "musa", "mlu", "xla", "tpu", "ipex", "neuron"})
INDIRECT = "reached every step through same-module calls"


# -- contexts: multimodal encoders run once per image, clip or prompt, not on every step ---------

# A class that is a multimodal encoder or a piece of one: a vision or audio tower, its attention
# and patch embeddings, the projector, resampler or patch merger between it and the language
# model. It runs in the step that brings a new image or clip (once per input), not in every
# decode step; a tokenizer's ``decode`` turns ids into text and is no model step at all.
MULTIMODAL_CLASS = re.compile(
    r"Vision|Visual|Vi[Tt](?![a-z])|Audio|Speech|Whisper\w*Encoder|Siglip|CLIP|Image(Encoder|Embed)"
    r"|Resampler|Projector|Merger|Abstractor|Tokenizer")
# A helper of the language model's forward that runs only for multimodal inputs
# (``self._execute_mm_encoder(...)``, ``self.get_image_features(...)``, ``self.encode_images(...)``).
MULTIMODAL_HELPER = re.compile(r"(^|_)(mm|multimodal|images?|videos?|audios?|vision|visual|pixels?)(_|$)")
# A model zoo's ``encoders/`` folder (a diffusion pipeline's text and image encoders).
ENCODER_PATH = re.compile(r"(^|/)encoders/[^/]+\.py$")
# A generation pipeline's prompt or condition encoding: a stage named for encoding
# (``QwenImageEncodingStage``, ``SanaTextEncodingStage``, ``Flux3ImageTextEncodeStage``) or a text or
# prompt encoder (``UMT5TextEncoder``). It runs once per request, before the denoising loop; its
# loops go over prompts, images and guidance branches, not over steps. (Not any ``*Encoding``:
# ``RotaryPositionalEncoding`` runs in every decode step.)
# Every other stage of such a pipeline but the denoising one (timestep and latent preparation,
# VAE decoding, output writing: ``Cosmos3TimestepPreparationStage``, ``Cosmos3MultiviewDecodingStage``)
# runs once per request too; only the denoising stage's loop runs per step.
ENCODING_CLASS = re.compile(r"Encod(e|ing|er)\w*Stage$|(Text|Prompt)Encod(er|ing)|^(?!\w*Denois)\w+Stage$")
# A module named for a vision encoder, by a word of its file name: ``moonvit.py``, ``intern_vit.py``,
# ``siglip2.py``, ``clip.py``, ``vision.py``, ``vision_tower.py``. Everything in it is a piece of the
# tower (its positional embeddings, MLPs, MoE blocks), run once per image. Not ``visual``
# (``visual_embedding.py`` holds a diffusion transformer's patch and timestep embeddings, run every
# denoising step), nor ``audio``/``whisper`` (``whisper.py`` holds the decoder, ``qwen2_audio.py``
# the language model, ``mova_audio_dit.py`` a denoising transformer).
VISION_MODULE_WORD = re.compile(r"^(\w*vit|siglip\d*|clip|vision)$")
# The language model of a multimodal model, which runs every decode step even when its class or
# file is named for vision (``Cohere2VisionForConditionalGeneration``, ``Granite4VisionLLMModel``).
LANGUAGE_MODEL_CLASS = re.compile(r"ForCausalLM|ForConditionalGeneration|LanguageModel|LLM|LMHead")


def once_per_input(owner: str, path: str) -> bool:
    """Whether a hot path written in ``owner`` (its class or function) in the module at ``path`` runs
    once per image, clip or prompt: a method of a multimodal encoder class (``MULTIMODAL_CLASS``) or
    of a pipeline's encoding stage or text encoder (``ENCODING_CLASS``), or a hot path in a module
    named for a vision encoder (``VISION_MODULE_WORD``); not a method of the language model
    (``LANGUAGE_MODEL_CLASS``). By names only, so the gate decides it as the rule does."""
    if LANGUAGE_MODEL_CLASS.search(owner):
        return False
    if owner and (MULTIMODAL_CLASS.search(owner) or ENCODING_CLASS.search(owner)):
        return True
    stem = re.sub(r"\.py$", "", path.replace("\\", "/").rsplit("/", 1)[-1]).lower()
    return any(VISION_MODULE_WORD.match(word) for word in stem.split("_"))


# -- contexts: what kind of code a function is, decided once per function, with the reason -------
#
# A per-step hot path is serving code that runs on every step. Code of another kind never is,
# whatever its name or caller: training (an optimizer's step, a loss, a backward pass, a function
# that calls ``.backward()``), calibration observers, memoized builders (once per distinct input),
# and the modules of tests, benchmarks, examples, scripts and training loops. ``function_context``
# answers for one function from what its definition shows (module path, class and its bases,
# decorators, name, whether its body trains); the index (``FileFacts.contexts``) and the rules
# (over libcst) ask the same function, so both decide alike.

# A training module: a trainer, a training loop, losses, optimizers (``training.py``,
# ``trainer/``, ``optimizers.py``, ``sft_trainer.py``, ``losses/``, ``fused_linear_cross_entropy.py``).
TRAINING_PATH = re.compile(
    r"(^|/)(train|training|trainers?|finetun\w*|fine_tun\w*|losses?|optim|optimi[sz]ers?)(/|\.py$)"
    r"|(^|/)\w+_(trainer|training|loss|losses)\.py$|(^|/)\w*cross_entropy\w*(/|\.py$)")
# Offline or one-time work by module: export, checkpoint conversion, calibration, weight loading
# (``export/`` or a private ``_export/``, ``convert_hf_to_neox.py``, ``calibration.py``, ``model_loader/``, ``loading/``).
OFFLINE_PATH = re.compile(
    r"(^|/)_?(export\w*|exporters?|conversion|calibrat\w*|ckpts?|loading|model_loader|weight_loader\w*)(/|\.py$)"
    r"|(^|/)convert_\w+\.py$")
# decorators whose function's body runs once per argument set (or once), not on every call
MEMOIZERS = {"lru_cache", "cache", "cached", "cache_once", "run_once", "once", "cached_property"}
# Training-only by name: a training step or loop, an autograd backward, a loss.
TRAINING_NAME = re.compile(r"^_?(train|training)(_\w+)?$|_train(ing)?_(step|loop|epoch)$|^backward$|^_?\w*_?loss(es)?$")
# An optimizer (``class Madgrad(torch.optim.Optimizer)``), a loss module (``class FusedCELoss(_Loss)``),
# a calibration observer or fake-quantizer (``MinMaxObserver``, ``HistogramCalibrator``).
OPTIMIZER_CLASS = re.compile(r"Optimi[sz]er$")
LOSS_CLASS = re.compile(r"Loss$")
OBSERVER_CLASS = re.compile(r"(Observer|Calibrator|FakeQuant\w*)$")
# A diffusers-style attention processor: its ``__call__`` is what the attention layer's forward
# calls on every step (``attn.processor(attn, hidden_states, ...)``), a call the index cannot
# resolve because the processor is chosen at run time.
ATTENTION_PROCESSOR = re.compile(r"(Attn|Attention)\w*Processor\w*$")
PROCESSOR_CALL = "an attention processor's __call__, run on every forward of its attention layer"


def function_context(path: str, klass: str, bases: tuple[str, ...], name: str, decorators: tuple[str, ...],
                     trains: bool = False) -> str | None:
    """Why a function is not serving code that could run every step, or None when it may be.

    ``klass`` is the class it is a method of ("" for a function), ``bases`` that class's bases as
    written, ``decorators`` the last components of its decorators' names, ``trains`` whether its body
    calls ``.backward()``, ``.zero_grad()`` or an optimizer's ``step()``."""
    path = path.replace("\\", "/")
    if TEST_PATH.search(path):
        return "test code (by its module's path)"
    if NOT_SERVING_PATH.search(path):
        return "a benchmark, evaluation, example, script or tool (by its module's path)"
    if TRAINING_PATH.search(path):
        return "training code (by its module's path)"
    if OFFLINE_PATH.search(path):
        return "export, conversion, calibration or weight loading (by its module's path)"
    if any(d in MEMOIZERS for d in decorators):
        return "memoized (@" + next(d for d in decorators if d in MEMOIZERS) + "): runs once per distinct input"
    lasts = [b.rsplit(".", 1)[-1] for b in bases]
    if klass and (OPTIMIZER_CLASS.search(klass) or any(OPTIMIZER_CLASS.search(b) for b in lasts)):
        return "training-only: a method of an optimizer"
    if klass and (LOSS_CLASS.search(klass) or any(LOSS_CLASS.search(b) for b in lasts)):
        return "training-only: a method of a loss"
    if klass and (OBSERVER_CLASS.search(klass) or any(OBSERVER_CLASS.search(b) for b in lasts)):
        return "calibration: a method of an observer or calibrator"
    if TRAINING_NAME.search(name):
        return "training-only (by its name)"
    if trains:
        return "training-only: it calls .backward(), .zero_grad() or an optimizer's step()"
    return None  # one-time work by name (``ONE_TIME``) is the walk's to skip: a configured entry point may match it


# ---- what a kernel module is: by its name, and (``kernel_loading``) by what importing it runs ----

# A module that holds the project's compiled or JIT kernels (``from .ops import fused_moe``,
# ``import my_ext._C``, ``from pkg.kernels.triton import matmul``). The compilers and DSLs themselves
# (``import triton``) are optional dependencies, not kernels. An extension's name ends in a word
# ``ext``/``extension`` (``awq_ext``, ``_ext``); ``forward_context`` or ``next_token`` does not.
# A compiled extension ends its name in ``_cuda`` (``flash_attn_2_cuda``); a module that starts with
# ``cuda`` is a binding or a helper (``nvidia.cuda_runtime``, ``cuda_graph``), not a kernel.
# Third-party kernel libraries: importing one loads its kernels, and a call into one
# (``aiter.init_custom_qr(...)``) sets them up or runs them.
KERNEL_LIBRARY = re.compile(
    r"^(aiter|flash_attn|flashinfer|deep_gemm|deep_ep|sgl_kernel|flash_mla|xformers|apex|transformer_engine"
    r"|fbgemm_gpu|mamba_ssm|causal_conv1d|cudnn|quack|liger_kernel|vllm_flash_attn|fla|bitsandbytes|gemlite"
    r"|sageattention|flash_attn_interface|exllamav2|awq_inference_engine)(\.|$)")
KERNEL_MODULE = re.compile(
    r"(^|\.)(_C|_?([a-z0-9_]*_)?ext(ension)?s?|[a-z0-9_]*kernels?|_?[a-z0-9_]*_ops|ops|[a-z0-9_]+_cuda|csrc"
    r"|triton|[a-z0-9_]+_triton|triton_[a-z0-9_]+|[a-z0-9_]+_cu|fused_[a-z0-9_]+)(\.|$)|" + KERNEL_LIBRARY.pattern)
NOT_KERNEL_MODULE = re.compile(r"^(triton|tilelang|cutlass|cuda|torch|numba|cupy|jax)(\.|$)")
# Calls that build or fetch a kernel at run time.
KERNEL_LOADERS = {"load_inline": ("load_inline",), "load": ("cpp_extension.load",), "load_library": ("ops.load_library",),
                  "load_jit": ("load_jit",),
                  "get_kernel": ("get_kernel",),
                  "compile": ("torch.compile", "tilelang.compile"),
                  "build": ("tvm.build",)}  # last name -> what the qualified name must end with
# A library call that asks rather than sets up: the chip (``get_gfx()``), a capability, a version.
QUERY_NAME = re.compile(r"^_*(get|is|has|can|supports?|check|query)_")


def kernel_module(name: str) -> bool:
    """Whether an imported module (dots and relative level as written) is a kernel module."""
    name = name.lstrip(".")
    return bool(name) and not NOT_KERNEL_MODULE.match(name) and bool(KERNEL_MODULE.search(name))


# What importing surely loads: a third-party kernel library or a compiled extension (``_C``,
# ``awq_ext``, ``flash_attn_2_cuda``, vLLM's ``_custom_ops``); a module merely named for kernels or
# ops (``ops``, ``kernels``, ``fused_moe``) may be plain Python, as the rules' names allow for.
EXTENSION_MODULE = re.compile(r"(^|\.)(_C|_[a-z0-9_]*_C|[a-z0-9_]*_ext|[a-z0-9_]+_cuda|[a-z0-9_]+_cu|_custom_ops)(\.|$)")


def loads_on_import(module: str) -> bool:
    """Whether importing ``module`` (absolute) surely loads a kernel (``EXTENSION_MODULE``)."""
    return bool(KERNEL_LIBRARY.match(module) or EXTENSION_MODULE.search(module)) and not NOT_KERNEL_MODULE.match(module)


def custom_op(name: str) -> bool:
    """Whether a qualified call name calls a registered custom op (``torch.ops.<namespace>.<op>``
    outside ``aten`` and ``prims``): a compiled kernel behind the dispatcher."""
    parts = name.split(".")
    return name.startswith("torch.ops.") and len(parts) >= 4 and parts[2] not in ("aten", "prims")


def kernel_loader(name: str) -> bool:
    """Whether a qualified call name builds or fetches a kernel (``KERNEL_LOADERS``)."""
    return any(name == need or name.endswith("." + need) for need in KERNEL_LOADERS.get(name.split(".")[-1], ()))


# Decorators that make a kernel of a function, by their qualified names.
TRITON_DECORATORS = {"triton.jit", "triton.autotune", "triton.heuristics"}
# Python kernel DSLs besides Triton: a function under one of these decorators is a kernel written in
# the file (or the host function that launches one): CuTe DSL, TileLang (and TVM script), Numba CUDA,
# Helion. Their other calls (compiling a kernel, wrapping a tensor for it) are plumbing, not work.
DSL_DECORATORS = {"cutlass.cute.kernel", "cutlass.cute.jit", "tilelang.jit", "tilelang.language.prim_func",
                  "tilelang.prim_func", "tvm.script.tir.prim_func", "tvm.script.prim_func", "numba.cuda.jit",
                  "helion.kernel"}


# Where agents and leaderboards keep solutions: a ``Model`` class in such a file is the solution
# (kernel-generation dumps name their answer ``Model`` as often as ``ModelNew``). A task's reference
# lives elsewhere (``level1/19_ReLU.py``) and authors no kernel.
SOLUTION_PATH = re.compile(
    r"(^|/)(solutions?|samples?|runs?|generations?|generated|candidates?|submissions?|attempts?|rollouts?"
    r"|trajector(y|ies)|agent[\w.-]*|iterations?)(/|$)"
    # or a folder named for the answers it keeps, the word one piece of a longer name:
    # ``kernel_solutions/``, ``best-submissions/``, ``triton_candidates/``
    r"|(^|/)([\w.-]*[_.-])?(solutions?|submissions?|candidates?)([_.-][\w.-]*)?(/|$)", re.IGNORECASE)


def is_solution_file(path: str, authors_kernel: bool) -> bool:
    """Whether a file's ``Model`` is a solution rather than a task's reference: it lives where
    solutions are kept, or the file itself builds or defines a kernel (a reference never does)."""
    return authors_kernel or bool(SOLUTION_PATH.search(path.rsplit("/", 1)[0] if "/" in path else ""))


def copies(files: dict[str, FileFacts]) -> dict[str, str]:
    """File -> the task file it repeats: a file kept where solutions are whose code is, statement for
    statement, a file of the project kept elsewhere (a run that recorded the task's reference as its
    answer). Its ``Model`` is that task's baseline, not a solution."""
    tasks: dict[str, str] = {}
    for rel, facts in sorted(files.items()):
        if facts.task_digest and not is_solution_file(rel, False):
            tasks.setdefault(facts.task_digest, rel)
    return {rel: tasks[facts.task_digest] for rel, facts in files.items()
            if facts.task_digest in tasks and is_solution_file(rel, False)}


def module_context(path: str) -> str | None:
    """Why no function of the module at ``path`` is serving code (a test, benchmark, training or
    export module), or None."""
    return function_context(path, "", (), "", ())


def _trains(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether a function's body (not its nested functions) runs a training step: it calls
    ``.backward()`` or ``.zero_grad()``, or ``step()`` of something named for an optimizer."""
    for node in _own_nodes(fn):
        if type(node) is ast.Call and type(node.func) is ast.Attribute:
            attr = node.func.attr
            if attr in ("backward", "zero_grad") or attr == "step" and re.search(
                    r"optim", dotted(node.func.value) or "", re.I):
                return True
    return False


def _own_nodes(fn: ast.AST):
    """The nodes of a function's body, not entering nested functions, classes or lambdas."""
    stack = list(fn.body) if hasattr(fn, "body") and type(fn.body) is list else [fn]
    while stack:
        node = stack.pop()
        yield node
        for child in ast_children(node):
            if type(child) not in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda):
                stack.append(child)


def _decorator_lasts(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[str, ...]:
    out = []
    for dec in fn.decorator_list:
        target = dec.func if type(dec) is ast.Call else dec
        text = dotted(target) or ""
        out.append(text.rsplit(".", 1)[-1])
    return tuple(out)


# -- step loops: the loop over generation or denoising steps -------------------------------------

# What a loop over steps names in its target, what it iterates or its test: ``for i, t in
# enumerate(timesteps)``, ``for step in range(num_inference_steps)``, ``while
# token_index_to_generate <= last``, ``for _ in range(max_new_tokens)``.
STEP_LOOP = re.compile(r"(^|_)(time)?steps?($|_)|timesteps|sigmas$|new_tokens|to_generate|(^|_)decode_steps?($|_)",
                       re.I)


def step_loop_names(names) -> bool:
    return any(STEP_LOOP.search(n) for n in names)


# A loop that runs a model and picks the next token from what it returned is a decode loop, whatever
# its names (``for cur_pos in range(start, total_len): logits = self.model.forward(...); tok =
# torch.argmax(logits[:, -1], -1)``, ``for _ in range(n - 1): tok, _ = generate_next_token(model, ...)``).
TOKEN_CHOICE = re.compile(r"^(argmax|multinomial|sample|sample_(tokens?|top_[pk]|logits)|\w*next_token)$")
MODEL_CALL = re.compile(r"(^|_)(model|transformer|decoder|forward)$", re.I)


def steps_a_model(loop: ast.For | ast.AsyncFor | ast.While) -> bool:
    """Whether a loop's own body runs a model (a ``forward``, a call on or of a ``model``) and either
    chooses a token from it (``argmax``, ``multinomial``, a sampler, a next-token helper: a decode
    loop) or updates a value it fed to the model from itself and the model's output, each pass
    feeding the next (``pred = model(x, t); x = x + (t_prev - t) * pred``, ``latents =
    scheduler.step(self.transformer(latents, t), t, latents)``: a denoising or refinement loop),
    whatever its names. The model must be the same every pass: a loop over layers (``for layer in
    layers: h = layer(h)``) is no loop over steps."""
    targets = {n.id for n in ast_nodes([loop.target]) if type(n) is ast.Name} if type(loop) is not ast.While else set()
    chose = ran = False
    fed: set[str] = set()  # the names passed to the model
    calls: set[int] = set()  # the model calls
    assigns: list[tuple[str, ast.expr]] = []  # (name, value) of the body's plain assignments
    stack = list(loop.body)
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is ast.Call:
            func = node.func
            last = func.attr if type(func) is ast.Attribute else func.id if type(func) is ast.Name else ""
            chose = chose or bool(TOKEN_CHOICE.search(last))
            if MODEL_CALL.search(last) or type(func) is ast.Attribute and MODEL_CALL.search(dotted(func.value) or ""):
                ran = True
                if MODEL_CALL.search(last) and not any(type(n) is ast.Name and n.id in targets for n in ast_nodes([func])):
                    # the model itself run (not a method of it, ``model.pre_quantize(m)``), the same
                    # every pass (not ``layer.forward(h)`` over ``for layer in layers``)
                    calls.add(id(node))
                    fed.update(a.id for a in [*node.args, *(k.value for k in node.keywords)] if type(a) is ast.Name)
            elif any(type(a) is ast.Name and MODEL_CALL.search(a.id) for a in node.args):
                ran = True  # ``generate_next_token(model, ...)``
        elif kind is ast.Assign and len(node.targets) == 1 and type(node.targets[0]) is ast.Name:
            assigns.append((node.targets[0].id, node.value))
        elif kind is ast.AugAssign and type(node.target) is ast.Name:
            assigns.append((node.target.id, ast.BinOp(ast.Name(node.target.id), node.op, node.value)))
        if ran and chose:
            return True
        stack.extend(c for c in ast_children(node) if type(c) not in _NOT_OWN)
    if not fed:
        return False
    outputs: set[str] = set()  # names holding the model's output, or what was computed from it
    grew = True
    while grew:
        grew = False
        for name, value in assigns:
            if name not in outputs and any(id(n) in calls or type(n) is ast.Name and n.id in outputs
                                           for n in ast_nodes([value])):
                outputs.add(name)
                grew = True
    return any(name in fed and name in outputs and any(type(n) is ast.Name and n.id == name for n in ast_nodes([value]))
               for name, value in assigns)


def is_step_loop(loop: ast.For | ast.AsyncFor | ast.While, outer: bool = True) -> bool:
    """A loop over generation or denoising steps: by what it names, or, for a loop not inside
    another loop of its function, a decode or denoising loop by what it does (:func:`steps_a_model`;
    such loops are a request's outermost, and walking every nested loop's body again would cost the
    index)."""
    return step_loop_names(_loop_names(loop)) or outer and steps_a_model(loop)


def _loop_names(loop: ast.For | ast.AsyncFor | ast.While) -> list[str]:
    parts = [loop.target, loop.iter] if type(loop) is not ast.While else [loop.test]
    return [n.id if type(n) is ast.Name else n.attr for part in parts for n in ast.walk(part)
            if type(n) in (ast.Name, ast.Attribute)]


def step_loops(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.AST]:
    """The outermost loops over steps in a function's own body that do not train (a loop whose body
    calls ``.backward()`` is a training loop)."""
    out = []
    stack = list(fn.body)
    while stack:
        node = stack.pop()
        if type(node) in (ast.For, ast.AsyncFor, ast.While) and is_step_loop(node) and not _trains(node):
            out.append(node)
            continue
        stack.extend(c for c in ast_children(node)
                     if type(c) not in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))
    return out


_NOT_OWN = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)


def _scan_function(fn: ast.FunctionDef | ast.AsyncFunctionDef, typed: dict[str, str] | None = None
                   ) -> tuple[set[str], bool, list[ast.AST], tuple[int, ...]]:
    """One walk of a function's own body for what :func:`file_facts` asks of it: the names it
    declares ``global`` or ``nonlocal``, whether it trains (:func:`_trains`), its loops over
    steps (:func:`step_loops`: the outermost that do not train; a training loop's own step loops
    count), and where those are among its own loop statements in source order (``for``/``async
    for`` and ``while``, not counting nested functions and classes: the n-th is the n-th
    ``libcst.For``/``While`` of the same body, which is how a rule finds them).

    With ``typed`` (its parameters annotated with a class), the same walk adds to ``typed`` the
    local names whose every assignment shows one type (``view = cache.get_view(i)``, ``b: Buf =
    ...``; ``value_type``), and records under ``"return"`` what its ``return`` statements build when
    they agree (``return CacheView(...)``)."""
    declared: set[str] = set()
    local: dict[str, str | None] = {}
    returned: set[str | None] = set()
    trains = False
    every: list[ast.AST] = []  # all its own loop statements (``for``, ``async for``, ``while``)
    loops: list[ast.AST] = []
    parent: list[int] = []  # each candidate loop's enclosing candidate (-1: none)
    training: list[bool] = []
    stack: list[tuple[ast.AST, int, bool]] = [(n, -1, False) for n in fn.body]  # (node, candidate, inside a loop)
    while stack:
        node, cand, looped = stack.pop()
        kind = type(node)
        if kind is ast.Global or kind is ast.Nonlocal:
            declared.update(node.names)
        elif typed is not None and (kind is ast.Assign or kind is ast.AnnAssign or kind is ast.Return):
            if kind is ast.Return:
                returned.add(value_type(node.value, typed) if node.value is not None else None)
            else:
                targets = node.targets if kind is ast.Assign else [node.target]
                for t in targets:
                    for el in (t.elts if type(t) is ast.Tuple else [t]):
                        if type(el) is ast.Name and el.id not in typed:
                            found = annotated_class(node.annotation) if kind is ast.AnnAssign else None
                            if found is None and type(t) is not ast.Tuple and node.value is not None:
                                found = value_type(node.value, typed)
                            local[el.id] = found if local.get(el.id, found) == found else None
        elif kind is ast.Call and type(node.func) is ast.Attribute:
            attr = node.func.attr
            if attr in ("backward", "zero_grad") or attr == "step" and re.search(
                    r"optim", dotted(node.func.value) or "", re.I):
                trains = True
                up = cand
                while up >= 0 and not training[up]:
                    training[up] = True
                    up = parent[up]
        elif kind in _LOOPS:
            every.append(node)
            if is_step_loop(node, outer=not looped):
                loops.append(node)
                parent.append(cand)
                training.append(False)
                cand = len(loops) - 1
        inner = looped or kind in _LOOPS
        stack.extend((c, cand, inner) for c in ast_children(node) if type(c) not in _NOT_OWN)
    steps = []
    for i, loop in enumerate(loops):
        up = parent[i]
        while up >= 0 and training[up]:
            up = parent[up]
        if not training[i] and up < 0:
            steps.append(loop)
    if steps:  # each step loop's place among the function's own loop statements, in source order
        order = {id(n): k for k, n in enumerate(sorted(every, key=lambda n: (n.lineno, n.col_offset)))}
        steps = sorted(steps, key=lambda n: order[id(n)])
        ordinals = tuple(order[id(n)] for n in steps)
    else:
        ordinals = ()
    if typed is not None:
        typed.update((name, found) for name, found in local.items() if found)
        shown = annotated_class(fn.returns)
        if shown is None and len(returned) == 1:
            shown = next(iter(returned))
        if shown:
            typed["return"] = shown
    return declared, trains, steps, ordinals


@dataclass
class FileFacts:
    """What the index needs of one file: its module name, imports and each function's calls."""

    module: str
    imports: dict[str, str] = field(default_factory=dict)  # local name -> qualified (relative imports resolved)
    # "f" or "Cls.m" -> the calls in its body (outside nested functions), as dotted text
    calls: dict[str, list[str]] = field(default_factory=dict)
    # "f" or "Cls.m" of a lazy initialiser -> the index of its guard among the body's statements:
    # the statements after it run once (see per_call_statements)
    once_after: dict[str, int] = field(default_factory=dict)
    # top-level names bound once to a number or arithmetic of numbers (``BLOCK = 64``)
    constants: set[str] = field(default_factory=set)
    # "f" or "Cls.m" -> its options: parameters defaulting to ``False``, with their positional
    # index (-1 for keyword-only ones)
    options: dict[str, dict[str, int]] = field(default_factory=dict)
    # "f" or "Cls.m" -> its parameters that default to ``None``, with their positional index (-1 for
    # keyword-only ones): what ``given_params`` asks every caller about
    nullable: dict[str, dict[str, int]] = field(default_factory=dict)
    # "f" or "Cls.m" -> (call text, positional arguments, keywords given a value that may be true)
    # for each call with arguments in its body
    passes: dict[str, list[tuple[str, int, tuple[str, ...]]]] = field(default_factory=dict)
    # "f" or "Cls.m" -> {index of the call in ``passes[f]``: (positions, keywords)} for the calls that
    # pass an argument that may be ``None`` (``maybe_none``; the others pass none)
    nones: dict[str, dict[int, tuple[tuple[int, ...], tuple[str, ...]]]] = field(default_factory=dict)
    # "f" or "Cls.m" -> its parameters' names, positional ones in order, then keyword-only ones as "*name"
    params: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # "f" or "Cls.m" -> {index of the call in ``passes[f]``: (positions, keywords)} for the calls that
    # pass an argument spelled as a host array there (the others pass none)
    hosts: dict[str, dict[int, tuple[tuple[int, ...], tuple[str, ...]]]] = field(default_factory=dict)
    # "f" or "Cls.m" -> why it is not serving code that may run every step (``function_context``);
    # absent for functions that may be
    contexts: dict[str, str] = field(default_factory=dict)
    # "f" or "Cls.m" -> the calls written inside its loops over steps (``step_loops``): they run every step
    step_calls: dict[str, list[str]] = field(default_factory=dict)
    # Per definition at any depth, by the dotted name the module model gives it (``Outer.Inner.m``,
    # ``f.helper``), what the rules ask of it: why it is not serving code (``function_context``;
    # empty where a reason holds for the whole module, see ``module_context``), and, for one that may
    # be, where its loops over steps are among its own loop statements (``_scan_function``)
    scope_contexts: dict[str, str] = field(default_factory=dict)
    step_loops: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # "f" or "Cls.m" -> what it returns, where its return annotation or its ``return`` statements show
    # it: a class (``"CacheView"``) or the result of a call (``"(CacheView)"``; see ``value_type``)
    returns: dict[str, str] = field(default_factory=dict)
    # class -> its bases as written, for the classes that have some (a method found on a base)
    bases: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # "f" or "Cls.m" -> what its own checks demand of its parameters (``kcheck.contracts.demands``)
    demands: dict[str, tuple[tuple[str, str, int], ...]] = field(default_factory=dict)
    # "f" or "Cls.m" -> (call text, (position, parameter) pairs, (keyword, parameter) pairs) for the
    # calls that pass one of its parameters on unchanged (``kcheck.contracts.argument_root``)
    forwards: dict[str, list[tuple[str, tuple, tuple]]] = field(default_factory=dict)
    # for a file defining a top-level ``Model`` class (a benchmark task, or a solution named like
    # one): a digest of its code (its syntax tree), to tell a copy of a task's file (``copies``)
    task_digest: str = ""
    # whether importing the module loads a kernel itself: at import time it imports a kernel module
    # or library, calls a kernel loader, or defines a Triton or DSL kernel (``kernel_loading``)
    loads_kernels: bool = False
    # the calls its import runs (module level and class bodies), for ``kernel_loading`` to follow
    # into the project's functions that build a kernel
    module_calls: tuple[str, ...] = ()
    # functions and methods whose own body launches a kernel -> what each launch launches, as
    # written: the kernel of ``kernel[grid](...)`` (``_fwd_kernel``, ``self.kernel``; "" where it is
    # no name: ``wrap(k)[grid](...)``) or a custom op (``torch.ops.<namespace>.<op>`` outside
    # ``aten``); ``op_kernel`` tells which of them are kernels
    launches: dict[str, list[str]] = field(default_factory=dict)
    # top-level functions under a Triton decorator (``@triton.jit``), by name
    kernels: set[str] = field(default_factory=set)
    # what it imports (qualified) -> how it reads it: "said", "used" or "silent" (``answered_reads``):
    # what ``read_elsewhere`` asks of the modules that import a flag
    reads: dict[str, str] = field(default_factory=dict)


def module_name(path: str) -> str:
    """``pkg/sub/mod.py`` -> ``pkg.sub.mod``; ``pkg/__init__.py`` -> ``pkg``; a file read as Python
    under another name (``run/sol.py.txt``) -> ``run.sol``."""
    parts = path.split("/")
    parts[-1] = parts[-1].split(".", 1)[0]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(p for p in parts if p)


def _absolute(module: str, target: str, is_package: bool) -> str:
    """A relative import target (``..ops.f``) made absolute from ``module``."""
    if not target.startswith("."):
        return target
    level = len(target) - len(target.lstrip("."))
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    rest = target[level:]
    return ".".join([*base, rest]) if rest else ".".join(base)


def absolute_import(path: str, target: str) -> str:
    """An import target as the file at ``path`` spells it (``..ops.f``) made absolute."""
    path = path.replace("\\", "/")
    return _absolute(module_name(path), target, path.endswith("__init__.py"))


def file_facts(tree: ast.Module, path: str) -> FileFacts:
    """Phase one: the facts of one parsed file, from one walk of its tree."""
    module = module_name(path)
    facts = FileFacts(module, constants=_numeric_constants(tree))
    if any(type(n) is ast.ClassDef and n.name == "Model" for n in tree.body):
        facts.task_digest = hashlib.sha256(ast.dump(tree).encode()).hexdigest()[:16]
    is_package = path.endswith("__init__.py")
    # (node, the function or method it is in: "f", "Cls.m", or "" outside any, nested functions "",
    # the class it is in, the dotted name of the def or class around it as the module model names it)
    stack: list[tuple[ast.AST, str, str, str]] = [(n, "", "", "") for n in tree.body]
    everywhere = module_context(path)  # a reason that holds for every function here
    classes: dict[str, tuple[str, ...]] = {}  # the full dotted name of each class -> its bases as written
    typed: dict[str, dict[str, str]] = {}  # function -> its parameters annotated with a class name
    bases: dict[str, tuple[str, ...]] = {}  # class -> its bases as written
    setters: dict[str, dict[str, set[str]]] = {}  # class -> method -> the ``self.x`` it assigns
    declared: dict[str, set[str]] = {}  # function -> the names it declares ``global`` or ``nonlocal``
    attributes: dict[str, dict[str, str]] = {}  # class -> ``self.x`` -> its type (``_self_assigned``)
    on_import: list[str] = []  # the calls the module's import runs
    decorated: list[str] = []  # the decorators of its top-level and class-level functions
    left: list[ast.AST] = []  # what the walk does not enter (error handlers, code below a lazy guard)
    hosts_in: dict[str, set[str]] = {}  # function -> its locals bound to host arrays only (host_locals)
    while stack:
        node, owner, klass, scope = stack.pop()
        kind = type(node)
        if kind is ast.Import or kind is ast.ImportFrom:
            for local, qualified in import_bindings(node):
                facts.imports[local] = _absolute(module, qualified, is_package)
                if not owner and not facts.loads_kernels:  # run on import
                    facts.loads_kernels = loads_on_import(qualified if kind is ast.Import else qualified.rsplit(".", 1)[0])
            continue
        if kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
            if not owner and node.decorator_list:
                texts = [text for d in node.decorator_list if (text := dotted(d.func if type(d) is ast.Call else d))]
                decorated.extend(texts)
                if not klass and any(_qualified(facts.imports, t) in TRITON_DECORATORS for t in texts):
                    facts.kernels.add(node.name)
            name = f"{klass}.{node.name}" if klass and not owner else node.name
            inner = name if not owner else ""  # a nested function's calls are not its parent's
            if not owner:
                facts.calls.setdefault(name, [])
                typed[name] = _annotated_params(node)
                typed[name].pop("return", None)
                found = _defaulting(node, False)
                if found:
                    facts.options[name] = found
                found = _defaulting(node, None)
                if found:
                    facts.nullable[name] = found
                facts.params[name] = _params(node)
                hosts_in[name] = host_locals(node)
                found = contracts.demands(node, facts.constants)
                if found:
                    facts.demands[name] = found
            full = f"{scope}.{node.name}" if scope else node.name
            # the class it is a method of, as the rules see it: none for a def inside a function
            holder = scope.rsplit(".", 1)[-1] if not owner and scope in classes else ""
            decorators = _decorator_lasts(node)
            if not owner and "." in name:  # what the class's attributes hold, for locals bound from them
                typed[name].update((f"self.{a}", t) for a, t in attributes.get(name.rsplit(".", 1)[0], {}).items())
            declared_here, trains, loops, ordinals = _scan_function(node, typed[name] if not owner else None)
            if not owner and "return" in typed[name]:
                facts.returns[name] = typed[name].pop("return")
            reason = function_context(path, holder, classes.get(scope, ()), node.name, decorators, trains)
            if not owner:
                declared[name] = declared_here
                top = reason if holder == klass else function_context(
                    path, klass, bases.get(klass, ()), node.name, decorators, trains)
                if top is not None:
                    facts.contexts[name] = top
                    loops = []
                if loops:
                    facts.step_calls[name] = [text for loop in loops for n in _own_nodes(loop)
                                              if type(n) is ast.Call and (text := dotted(n.func))]
            if reason is not None:
                if everywhere is None:
                    facts.scope_contexts[full] = reason
            elif ordinals:
                facts.step_loops[full] = ordinals
            every = per_call_statements(node, setters.get(klass) if klass and not owner else None)
            if len(every) < len(node.body) and not owner:
                facts.once_after[name] = len(every) - 1
            left.extend(node.body[len(every):])
            stack.extend((n, inner or "<nested>", "", full) for n in every)
            continue
        if kind is ast.ClassDef:
            full = f"{scope}.{node.name}" if scope else node.name
            classes[full] = tuple(t for b in node.bases if (t := dotted(b)))
            if not owner and not klass:
                bases[node.name] = classes[full]
                if classes[full]:
                    facts.bases[node.name] = classes[full]
                types: dict[str, str | None] = {}
                setters[node.name] = {m.name: _self_assigned(m, types) for m in node.body
                                      if type(m) in (ast.FunctionDef, ast.AsyncFunctionDef)}
                for m in node.body:  # a dataclass's fields, a class's annotated attributes
                    if type(m) is ast.AnnAssign and type(m.target) is ast.Name:
                        shown = annotated_class(m.annotation)
                        types[m.target.id] = shown if types.get(m.target.id, shown) == shown else None
                attributes[node.name] = {a: t for a, t in types.items() if t}
            stack.extend((n, owner, node.name if not owner and not klass else "", full) for n in node.body)
            continue
        if kind is ast.Lambda:
            continue
        if kind is ast.Call and not owner and (text := dotted(node.func)):
            on_import.append(text)
        if kind is ast.Call and owner and owner != "<nested>" and (
                type(node.func) is ast.Subscript or custom_op(dotted(node.func) or "")):
            facts.launches.setdefault(owner, []).append(
                dotted(node.func.value if type(node.func) is ast.Subscript else node.func) or "")
        if kind is ast.Call and owner and owner != "<nested>":
            text = dotted(node.func)
            if text:
                head, dot, rest = text.partition(".")
                cls = typed[owner].get(head) if dot else None  # ``timer.median_us()`` of ``timer: Timer``
                if cls is None and head == "self" and rest.count(".") == 1 and "." in owner:
                    attr, _, rest = rest.partition(".")  # ``self.cache.update()`` of ``self.cache = Cache()``
                    cls = attributes.get(owner.rsplit(".", 1)[0], {}).get(attr)
                    if cls is None:
                        rest = f"{attr}.{rest}"
                facts.calls[owner].append(f"{cls}.{rest}" if cls else text)
                if node.args or node.keywords:
                    count = 99 if any(type(a) is ast.Starred for a in node.args) else len(node.args)
                    facts.passes.setdefault(owner, []).append((facts.calls[owner][-1], count, tuple(
                        kw.arg or "**" for kw in node.keywords if not _off_value(kw.value, kw.arg))))
                    params = facts.params.get(owner, ())
                    roots = tuple((i, r) for i, a in enumerate(node.args) if (r := contracts.argument_root(a)) in params)
                    named = tuple((kw.arg, r) for kw in node.keywords
                                  if kw.arg and (r := contracts.argument_root(kw.value)) in params)
                    if (roots or named) and contracts.may_demand(text, params):
                        facts.forwards.setdefault(owner, []).append((facts.calls[owner][-1], roots, named))
                    nulls = facts.nullable.get(owner, {})
                    nones = (tuple(i for i, a in enumerate(node.args) if maybe_none(a, nulls)),
                             tuple(kw.arg for kw in node.keywords if kw.arg and maybe_none(kw.value, nulls)))
                    if nones[0] or nones[1]:
                        facts.nones.setdefault(owner, {})[len(facts.passes[owner]) - 1] = nones
                    local = hosts_in.get(owner, frozenset())
                    positions = tuple(i for i, a in enumerate(node.args) if host_spelled(a, local))
                    keywords = tuple(kw.arg for kw in node.keywords if kw.arg and host_spelled(kw.value, local))
                    if positions or keywords:
                        facts.hosts.setdefault(owner, {})[len(facts.passes[owner]) - 1] = (positions, keywords)
        if kind is ast.ExceptHandler:
            left.append(node)
            continue  # an error path, not the step (a handler that re-raises or logs)
        if kind is ast.If and type(node.test) is ast.Constant and not node.test.value:
            left.extend(node.body)
            stack.extend((n, owner, klass, scope) for n in node.orelse)  # ``if False:``: never runs
            continue
        if kind is ast.If and (other_backend(node.test) or _fills_cache(node, declared.get(owner, set()))):
            # not that backend's branch; a branch that fills the cache its test reads runs once
            left.extend(node.body)
            stack.extend((n, owner, klass, scope) for n in [node.test, *node.orelse])
            continue
        if kind is ast.If and node.orelse and _fills_cache(node, declared.get(owner, set()), other=True):
            # ``if self._c is not None and self._c[0] == key: use it / else: fill self._c``
            left.extend(node.orelse)
            stack.extend((n, owner, klass, scope) for n in [node.test, *node.body])
            continue
        stack.extend((n, owner, klass, scope) for n in ast_children(node))
    for root in left:  # imports in what the walk leaves (handlers, below lazy guards) bind names too
        for node in ast.walk(root):
            if type(node) is ast.Import or type(node) is ast.ImportFrom:
                for local, qualified in import_bindings(node):
                    facts.imports.setdefault(local, _absolute(module, qualified, is_package))
    qualified = [_qualified(facts.imports, text) for text in decorated]
    facts.loads_kernels = facts.loads_kernels or any(q in TRITON_DECORATORS or q in DSL_DECORATORS for q in qualified)
    calls = [_qualified(facts.imports, text) for text in on_import]
    facts.loads_kernels = facts.loads_kernels or any(kernel_loader(q) for q in calls)
    facts.module_calls = tuple(dict.fromkeys(text for text in on_import if "." not in text or text.split(".")[0] in facts.imports))
    facts.reads = answered_reads(tree, facts.imports)
    return facts


# Announcements a user sees at the serving engines' default log level, INFO (vLLM's
# VLLM_LOGGING_LEVEL and SGLang's --log-level default to it): anything above debug; and what a
# console object prints (``console.print`` of rich, ``accelerator.print``, ``click.echo``).
VISIBLE_METHODS = {"warning_once", "warn_once", "print_warning_once", "warning", "warn", "error", "exception",
                   "critical", "info", "info_once", "print_info_once", "print", "echo"}


def says(statements: list[ast.stmt]) -> bool:
    """Whether running ``statements`` raises or tells the user (``print``, ``warnings.warn``, a
    logger call at info level or above), outside nested definitions."""
    stack = list(statements)
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda):
            continue
        if kind is ast.Raise:
            return True
        if kind is ast.Call:
            func = node.func
            if type(func) is ast.Name and func.id == "print" or type(func) is ast.Attribute and func.attr in VISIBLE_METHODS:
                return True
        stack.extend(ast.iter_child_nodes(node))
    return False


def answered_reads(tree: ast.Module, imports: dict[str, str] | None) -> dict[str, str]:
    """Qualified name -> how this file reads a name it imports (every name, by its local name, when
    ``imports`` is None: a chunk of a large file, whose imports another chunk may hold), when a failed import left it
    ``None`` or ``False``: "said" when every test of it answers "missing" out loud (an ``assert``,
    or an ``if`` whose branch for "missing", the body under ``not flag``/``flag is None`` and the
    ``else`` otherwise, raises or tells the user: ``if not HAVE_DEEPEP: raise ImportError(...)``,
    ``if not has_fp8(): logger.warning(...)``); "used" when it is only called or dereferenced
    (``Buffer(group)`` fails loudly on ``None``); "silent" when some read chooses quietly or hands
    the name on (a quiet ``if HAVE_X: ... else: ...``, ``use_fast = HAVE_X``)."""
    said: set[int] = set()  # the ids of the name nodes read in tests that answer out loud
    tested: set[int] = set()  # ... in any test
    used: set[int] = set()  # ... called or dereferenced
    reads: list[ast.Name] = []
    tests: list[tuple[ast.expr, list, list]] = []  # (test, its body, its else or what follows a returning body)
    for node in ast.walk(tree):  # one walk collects; the tests are judged only where they read a name
        kind = type(node)
        if kind is ast.Name:
            if type(node.ctx) is ast.Load and (imports is None or "." in imports.get(node.id, "")):
                reads.append(node)
        elif kind is ast.Call:
            used.add(id(node.func))
        elif kind is ast.Attribute:
            used.add(id(node.value))
        elif kind is ast.Assert:
            tests.append((node.test, [], []))
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if type(block) is not list:
                continue
            for i, stmt in enumerate(block):
                if type(stmt) is ast.If:  # an ``if`` that returns has the statements after it as its else
                    rest = stmt.orelse or (block[i + 1:] if type(stmt.body[-1]) in (ast.Return, ast.Raise) else [])
                    tests.append((stmt.test, stmt.body, rest))
    if not reads:
        return {}
    wanted = {n.id for n in reads}

    def visit(expr: ast.expr, flipped: bool, body_says, else_says) -> None:
        kind = type(expr)
        if kind is ast.UnaryOp and type(expr.op) is ast.Not:
            visit(expr.operand, not flipped, body_says, else_says)
        elif kind is ast.BoolOp:
            for value in expr.values:
                visit(value, flipped, body_says, else_says)
        elif kind is ast.Compare and len(expr.ops) == 1 and type(expr.comparators[0]) is ast.Constant \
                and expr.comparators[0].value in (None, False):
            visit(expr.left, flipped != (type(expr.ops[0]) in (ast.Is, ast.Eq)), body_says, else_says)
        elif kind is ast.Call:
            visit(expr.func, flipped, body_says, else_says)  # ``if not has_fp8():``: the probe's answer
        elif kind is ast.Name and expr.id in wanted:
            tested.add(id(expr))
            if (body_says if flipped else else_says)():
                said.add(id(expr))

    for test, body, rest in tests:
        if any(type(n) is ast.Name and n.id in wanted for n in ast.walk(test)):
            if not body and not rest:  # an ``assert``: "missing" raises
                visit(test, False, lambda: True, lambda: True)
            else:
                visit(test, False, lambda body=body: says(body), lambda rest=rest: bool(rest) and says(rest))
    found: dict[str, str] = {}
    for node in reads:
        how = "said" if id(node) in said else "used" if id(node) in used and id(node) not in tested else "silent"
        key = node.id if imports is None else imports[node.id]
        found[key] = _weakest(found.get(key, how), how)
    return found


def _weakest(a: str, b: str) -> str:
    """Of two ways of reading a name (``answered_reads``), the one that says less: silent, used, said."""
    return a if READ_ORDER.index(a) <= READ_ORDER.index(b) else b


READ_ORDER = ("silent", "used", "said")


BENCH_SCRIPT = re.compile(r"(^|/)bench[^/]*\.py$")  # a benchmark script (``benchmark.py``, ``bench_gemm.py``)


def harness_modules(files: dict[str, FileFacts]) -> dict[str, str]:
    """Modules of a folder that is no package (no ``__init__.py``) that only scripts of the same
    folder import, all of them tests, benchmarks, examples or scripts by their path: a benchmark
    problem's ``sota.py`` or ``reference.py`` beside its ``benchmark.py`` (``import sota``, found on
    the script's own folder). They are that code's helpers whatever their own names say. File path
    -> the first script that imports it."""
    folders: dict[str, dict[str, str]] = {}
    for rel in files:
        folder, _, name = rel.rpartition("/")
        if name.endswith(".py") and name != "__init__.py":
            folders.setdefault(folder, {})[name[:-3]] = rel
    out: dict[str, str] = {}
    for folder, stems in folders.items():
        if f"{folder}/__init__.py" in files or "__init__.py" in files and not folder:
            continue
        importers: dict[str, set[str]] = {}
        for rel in stems.values():
            for qualified in files[rel].imports.values():
                target = stems.get(qualified.split(".", 1)[0])
                if target is not None and target != rel:
                    importers.setdefault(target, set()).add(rel)
        for target, who in importers.items():
            if module_context(target) is None and all(NOT_SERVING_PATH.search(r) or BENCH_SCRIPT.search(r) for r in who):
                out[target] = sorted(who)[0]
    return out


def read_elsewhere(files: dict[str, FileFacts], resolve: Resolver | None = None) -> dict[str, tuple[tuple[str, str], ...]]:
    """File -> its top-level names that other modules of the project import (directly or through a
    package that re-exports them) and read, each with how the least careful of them reads it
    (``answered_reads``): a flag or probe whose failed import every importer refuses or announces
    leaves no silent path behind, however quiet the ``except`` that set it."""
    resolve = resolve or Resolver(files)
    verdict: dict[tuple[str, str], str] = {}
    for path, facts in files.items():
        for qualified, how in facts.reads.items():
            module, _, name = qualified.rpartition(".")
            target = resolve.module_path(module) if module else None
            for _ in range(3):  # ``from pkg import HAVE_X`` where ``pkg/__init__.py`` imports it from ``.utils``
                onward = files[target].imports.get(name) if target is not None else None
                module, _, onward_name = (onward or "").rpartition(".")
                onward_target = resolve.module_path(module) if module else None
                if onward_target is None:
                    break  # bound in ``target`` (by the ``try`` that imports it from outside the project)
                target, name = onward_target, onward_name
            if target is not None and target != path:
                verdict[(target, name)] = _weakest(verdict.get((target, name), how), how)
    out: dict[str, list[tuple[str, str]]] = {}
    for (path, name), how in verdict.items():
        out.setdefault(path, []).append((name, how))
    return {path: tuple(sorted(names)) for path, names in out.items()}


def _qualified(imports: dict[str, str], text: str) -> str:
    """A call or decorator text with its first name replaced by what it was imported as."""
    head, dot, rest = text.partition(".")
    return imports[head] + dot + rest if head in imports else text


def _numeric_constants(tree: ast.Module) -> set[str]:
    """``Places.constants`` over ``ast``: top-level names bound once to a number or to arithmetic
    of numbers and other such names."""
    bound: dict[str, list[ast.expr]] = {}
    for stmt in tree.body:
        if type(stmt) is ast.Assign and len(stmt.targets) == 1 and type(stmt.targets[0]) is ast.Name:
            bound.setdefault(stmt.targets[0].id, []).append(stmt.value)
        elif type(stmt) is ast.AnnAssign and type(stmt.target) is ast.Name and stmt.value is not None:
            bound.setdefault(stmt.target.id, []).append(stmt.value)

    def numeric(expr: ast.expr) -> bool:
        if type(expr) is ast.Constant:
            return type(expr.value) in (int, float)
        if type(expr) is ast.Name:
            return expr.id in found
        if type(expr) is ast.UnaryOp:
            return numeric(expr.operand)
        return type(expr) is ast.BinOp and numeric(expr.left) and numeric(expr.right)

    found: set[str] = set()
    grew = True
    while grew:
        grew = False
        for name, values in bound.items():
            if name not in found and len(values) == 1 and numeric(values[0]):
                found.add(name)
                grew = True
    return found


def _defaulting(fn: ast.FunctionDef | ast.AsyncFunctionDef, value: bool | None) -> dict[str, int]:
    """A function's parameters that default to ``value`` (``False``: its options; ``None``), with
    their positional index (-1: keyword-only)."""
    out = {}
    positional = [*fn.args.posonlyargs, *fn.args.args]
    for i, (arg, default) in enumerate(zip(positional[len(positional) - len(fn.args.defaults):], fn.args.defaults)):
        if type(default) is ast.Constant and default.value is value:
            out[arg.arg] = len(positional) - len(fn.args.defaults) + i
    for arg, default in zip(fn.args.kwonlyargs, fn.args.kw_defaults):
        if type(default) is ast.Constant and default.value is value:
            out[arg.arg] = -1
    return out


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[str, ...]:
    """A function's parameters: positional ones in order, then keyword-only ones as ``*name``."""
    return (*(a.arg for a in [*fn.args.posonlyargs, *fn.args.args]), *(f"*{a.arg}" for a in fn.args.kwonlyargs))


def host_spelled(expr: ast.expr, local: set[str] | frozenset = frozenset()) -> bool:
    """An argument the code spells as a host array (``kcheck.values``' naming rule over ``ast``):
    a ``*_cpu``/``*_np``/``host_*`` name or attribute, sliced or not, a ``.cpu()``/``.numpy()``/
    ``.tolist()`` result, a ``torch.tensor(...)`` given no device, arithmetic of such values and
    numbers (``kv_lens_cpu - qo_lens_cpu``), or a name of ``local``: the caller's locals bound to
    such values only (:func:`host_locals`)."""
    while True:
        kind = type(expr)
        if kind is ast.Subscript:
            expr = expr.value
        elif kind is ast.Call and type(expr.func) is ast.Attribute and expr.func.attr in ("cpu", "numpy", "tolist"):
            return True
        elif kind is ast.Call:
            return dotted(expr.func) in ("torch.tensor", "torch.as_tensor", "torch.from_numpy") and not any(
                kw.arg == "device" for kw in expr.keywords)
        elif kind is ast.BinOp:
            sides = [s for s in (expr.left, expr.right) if not (type(s) is ast.Constant and type(s.value) in (int, float))]
            return bool(sides) and all(host_spelled(s, local) for s in sides)
        elif kind is ast.Name:
            return bool(HOST_NAME.search(expr.id)) or expr.id in local
        elif kind is ast.Attribute:
            return bool(HOST_NAME.search(expr.attr))
        else:
            return False


def host_locals(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """The local names of ``fn`` (not its nested functions) that every assignment binds to a value
    :func:`host_spelled` accepts (``side_kv = kv_lens_cpu[lo:hi]``), each through the others too."""
    params = [*(n.lstrip("*") for n in _params(fn)), *(a.arg for a in (fn.args.vararg, fn.args.kwarg) if a is not None)]
    bound: dict[str, list[ast.AST]] = {name: [fn.args] for name in params}  # parameters: not known
    for node in _own_nodes(fn):
        kind = type(node)
        targets = node.targets if kind is ast.Assign else [node.target] if kind in (
            ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor, ast.NamedExpr) else [node.optional_vars] if (
            kind is ast.withitem and node.optional_vars is not None) else []
        value = node.value if kind in (ast.Assign, ast.AnnAssign) and node.value is not None else None
        for target in targets:
            if type(target) is ast.Name and value is not None:
                bound.setdefault(target.id, []).append(value)
            else:  # a tuple target, a loop variable, ``x += ...``: not followed
                for n in ast.walk(target):
                    if type(n) is ast.Name:
                        bound.setdefault(n.id, []).append(target)
    found: set[str] = set()
    grew = True
    while grew:
        grew = False
        for name, values in bound.items():
            if name not in found and all(host_spelled(v, found) for v in values):
                found.add(name)
                grew = True
    return found


def host_params(files: dict[str, FileFacts], resolve: Resolver | None = None) -> dict[str, tuple[tuple[str, str], ...]]:
    """File path -> ``(function, parameter)`` for the parameters every call in the project passes a
    host array (``_count_tokens(expert_num_tokens_cpu)``): inside the function the parameter is on
    the host, whatever it is called there."""
    return _every_call_passes(files, resolve, lambda facts, name, i, count, keywords: facts.hosts.get(name, {}).get(i, ((), ())))


def given_params(files: dict[str, FileFacts], resolve: Resolver | None = None) -> dict[str, tuple[tuple[str, str], ...]]:
    """File path -> ``(function, parameter)`` for the parameters defaulting to ``None`` that every
    call in the project passes a value (not a literal ``None``, by position or by keyword): code
    under ``if parameter is None:`` in such a function is a default no caller takes."""
    def given(facts: FileFacts, name: str, i: int, count: int, keywords: tuple[str, ...]):
        positions, named = facts.nones.get(name, {}).get(i, ((), ()))
        return tuple(j for j in range(count) if j not in positions), tuple(k for k in keywords if k not in named)
    found = _every_call_passes(files, resolve, given, {_last(fn) for f in files.values() for fn in f.nullable})
    return {path: kept for path, pairs in found.items()
            if (kept := tuple((fn, p) for fn, p in pairs if p in files[path].nullable.get(fn, {})))}


def _every_call_passes(files: dict[str, FileFacts], resolve: Resolver | None, marks,
                        bare_to: set[str] = frozenset()) -> dict[str, tuple[tuple[str, str], ...]]:
    """File path -> ``(function, parameter)`` for the parameters that every resolved call in the
    project passes an argument ``marks`` accepts (``marks(facts, caller, call index, positional
    count, keywords)`` gives the accepted positions and keywords). A function with no resolved call,
    or one call that spreads ``*args``/``**kwargs`` or passes something else there, keeps its
    parameter unknown; so does one called with no argument at all, among the functions named in
    ``bare_to`` (the calls with none are resolved only for those)."""
    resolve = resolve or Resolver(files)
    seen: dict[tuple[str, str], dict[str, bool]] = {}  # (path, function) -> parameter -> accepted at every call
    for path, facts in files.items():
        for name, calls in facts.calls.items():
            passes = facts.passes.get(name, [])
            with_arguments = Counter(text for text, _, _ in passes)
            # a call with no arguments passes nothing: (text, 0, ()) stands for each of them
            bare = [(text, 0, ()) for text, n in Counter(calls).items() if _last(text) in bare_to
                    for _ in range(n - with_arguments[text])]
            for i, (text, count, keywords) in enumerate([*passes, *bare]):
                hit = resolve(path, name, text)
                if hit is None or hit[1] not in files[hit[0]].params:
                    continue
                params = files[hit[0]].params[hit[1]]
                offset = 1 if "." in hit[1] else 0  # a method's first parameter is bound (``self.m(x)``)
                state = seen.setdefault(hit, {p.lstrip("*"): True for j, p in enumerate(params)
                                              if j >= offset or p.startswith("*")})
                spread = count == 99 or "**" in keywords
                positions, named = marks(facts, name, i, count, keywords) if i < len(passes) else ((), ())
                for j, p in enumerate(params):
                    param = p.lstrip("*")
                    if param in state and state[param]:
                        state[param] = not spread and (param in named or not p.startswith("*") and (
                            j >= offset and j - offset in positions))
    out: dict[str, list[tuple[str, str]]] = {}
    for (path, name), state in seen.items():
        out.setdefault(path, []).extend((name, p) for p, host in state.items() if host)
    return {path: tuple(sorted(found)) for path, found in out.items() if found}


def maybe_none(value: ast.expr, nullable: dict[str, int] | tuple = ()) -> bool:
    """An argument that may be ``None``: the literal, a lookup with no default (``kwargs.get("x")``,
    ``getattr(o, "x", None)``), a conditional expression with a ``None`` side, or the caller's own
    parameter that defaults to ``None`` (``nullable``) passed along."""
    kind = type(value)
    if kind is ast.Constant:
        return value.value is None
    if kind is ast.IfExp:
        return maybe_none(value.body, nullable) or maybe_none(value.orelse, nullable)
    if kind is ast.Name:
        return value.id in nullable
    if kind is ast.Call:
        func = value.func
        if type(func) is ast.Attribute and func.attr in ("get", "pop") and len(value.args) < 2:
            return True
        return type(func) is ast.Name and func.id == "getattr" and (
            len(value.args) < 3 or maybe_none(value.args[2], nullable))
    return False


def _off_value(value: ast.expr, keyword: str | None) -> bool:
    """An argument that leaves an option off: ``False``, ``None``, ``0``, or the caller's own
    parameter of the same name passed along (``check=check``)."""
    if type(value) is ast.Constant:
        return not value.value
    return type(value) is ast.Name and value.id == keyword


def _annotated_params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, str]:
    """Parameter -> the class its annotation names (``timer: Timer``, ``x: "ops.Timer"``,
    ``cache: Optional[CacheView]``, ``view: CacheView | None``), for the parameters annotated with a
    plain or dotted name, or one of those or ``None``."""
    out = {}
    for arg in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]:
        text = annotated_class(arg.annotation)
        if text:
            out[arg.arg] = text
    return out


# Annotations that name no class of the project whose methods a call could reach.
_NOT_A_CLASS = {"None", "int", "float", "bool", "str", "bytes", "list", "dict", "tuple", "set", "object", "Any",
                "List", "Dict", "Tuple", "Set", "Callable", "Sequence", "Iterable", "Iterator", "Mapping", "Type"}


def annotated_class(ann: ast.expr | None) -> str | None:
    """The class an annotation names: ``Timer``, ``ops.Timer``, ``"Timer"``, and ``Optional[X]``,
    ``Union[X, None]``, ``X | None`` of one; None for anything else (containers, builtins, unions
    of several classes)."""
    if ann is None:
        return None
    if type(ann) is ast.Constant and type(ann.value) is str:
        text = ann.value.strip()
        if text.replace(".", "").isidentifier():
            return None if text in _NOT_A_CLASS else text
        try:
            ann = ast.parse(text, mode="eval").body
        except SyntaxError:
            return None
    if type(ann) in (ast.Name, ast.Attribute):
        text = dotted(ann)
        return None if not text or text in _NOT_A_CLASS or text.rsplit(".", 1)[-1] in _NOT_A_CLASS else text
    if type(ann) is ast.BinOp and type(ann.op) is ast.BitOr:
        parts = [ann.left, ann.right]
    elif type(ann) is ast.Subscript and (dotted(ann.value) or "").rsplit(".", 1)[-1] in ("Optional", "Union"):
        parts = list(ann.slice.elts) if type(ann.slice) is ast.Tuple else [ann.slice]
    else:
        return None
    named = [p for p in parts if not (type(p) is ast.Constant and p.value is None)]
    return annotated_class(named[0]) if len(named) == 1 else None


def value_type(value: ast.expr, typed: dict[str, str]) -> str | None:
    """What an assigned value tells of its type, as the index writes it: ``"(C)"`` for the result of
    the call ``C(...)`` (a class built, or what a function returns: phase two decides), the class of a
    name the function knows (``typed``: annotated parameters), else None."""
    if type(value) is ast.Call:
        text = dotted(value.func)
        if not text or text.startswith(_LIBRARY_HEADS):
            return None
        head, dot, rest = text.partition(".")
        if dot and head in typed and "." not in rest:
            text = f"{typed[head]}.{rest}"  # ``cache.get_view(...)`` of ``cache: BufferCache``
        elif head == "self" and rest.count(".") == 1 and f"self.{rest.partition('.')[0]}" in typed:
            attr, _, method = rest.partition(".")  # ``self.cache.get_view(...)`` of ``self.cache = BufferCache()``
            text = f"{typed['self.' + attr]}.{method}"
        return f"({text})"
    if type(value) is ast.Name and value.id in typed:
        return typed[value.id]
    return None


# Calls whose result is no object of the project (tensors, arrays, numbers, containers).
_LIBRARY_HEADS = ("torch.", "np.", "numpy.", "math.", "triton.", "tl.", "F.", "os.", "int", "float", "len", "list",
                  "dict", "tuple", "set", "str", "range", "enumerate", "zip", "sum", "max", "min", "getattr",
                  "isinstance", "super", "type")


def _fills_cache(node: ast.If, declared: set[str] = frozenset(), other: bool = False) -> bool:
    """``if self._adapter is None: self._adapter = make()``, ``if not _table: _table = build()`` (with
    ``global _table``), ``if key not in cache: cache[key] = build(key)``: a branch that runs once (per
    key). With ``other``, the ``else`` of a test that the cache holds what is wanted (``if
    self._c is not None and self._c[0] == key: ... else: self._c = (key, build())``).

    What is filled must outlive the call: an attribute, a container filled by subscript, or a name
    the function declares ``global``/``nonlocal``. A local name rebound in the branch (``if x is
    None: x = default()``) is an ordinary branch, taken on every call that passes ``None``."""
    test = node.test
    names = _absent_names(test) if not other else _present_names(test)
    if not names:
        return False
    for stmt in (node.body if not other else node.orelse):
        for sub in ast_nodes([stmt]):
            targets = sub.targets if type(sub) is ast.Assign else [sub.target] if type(sub) is ast.AnnAssign else []
            for t in targets:
                for el in (t.elts if type(t) is ast.Tuple else [t]):
                    filled = dotted(el.value if type(el) is ast.Subscript else el)
                    if filled in names and (type(el) is ast.Subscript or "." in filled or filled in declared):
                        return True
    return False


def _absent_names(test: ast.expr) -> set[str]:
    """What a test asks is missing: ``x is None``, ``not x``, ``k not in cache`` (the first of an ``or``)."""
    if type(test) is ast.BoolOp and type(test.op) is ast.Or:
        test = test.values[0]
    if type(test) is ast.Compare and len(test.ops) == 1 and type(test.ops[0]) is ast.Is \
            and type(test.comparators[0]) is ast.Constant and test.comparators[0].value is None:
        target = test.left
    elif type(test) is ast.UnaryOp and type(test.op) is ast.Not:
        target = test.operand
    elif type(test) is ast.Compare and len(test.ops) == 1 and type(test.ops[0]) is ast.NotIn:
        target = test.comparators[0]
    else:
        return set()
    name = dotted(target) if type(target) in (ast.Name, ast.Attribute) else None
    return {name} if name else set()


def _present_names(test: ast.expr) -> set[str]:
    """What a test asks is cached: ``x is not None``, ``k in cache``, ``self._key == key``,
    ``self._c[:2] == (ptr, shape)``, and ``and`` of those (every part must be such a test)."""
    parts = test.values if type(test) is ast.BoolOp and type(test.op) is ast.And else [test]
    found: set[str] = set()
    for part in parts:
        if type(part) is not ast.Compare or len(part.ops) != 1:
            return set()
        op, left, right = part.ops[0], part.left, part.comparators[0]
        if type(op) is ast.IsNot and type(right) is ast.Constant and right.value is None:
            target = left
        elif type(op) is ast.In:
            target = right
        elif type(op) is ast.Eq:
            target = next((x.value if type(x) is ast.Subscript else x for x in (left, right)
                           if type(x.value if type(x) is ast.Subscript else x) is ast.Attribute), None)
        else:
            return set()
        name = dotted(target) if type(target) in (ast.Name, ast.Attribute) else None
        if not name:
            return set()
        found.add(name)
    return found


def other_backend(test: ast.expr) -> bool:
    """Whether a branch's test holds only off CUDA GPUs: it asks for another backend (``is_npu()``,
    ``current_platform.is_xpu()``, ``_is_cpu``), names one (``x.device.type == "mps"``,
    ``SYSTEM == "ipex"``, ``device.type in ("cpu", "mps")``) or denies CUDA (``not
    current_platform.is_cuda_alike()``). In an ``and`` one such clause is enough; in an ``or`` every
    clause must be one."""
    kind = type(test)
    if kind is ast.BoolOp:
        parts = [other_backend(v) for v in test.values]
        return any(parts) if type(test.op) is ast.And else all(parts)
    if kind is ast.UnaryOp and type(test.op) is ast.Not:
        inner = test.operand.func if type(test.operand) is ast.Call else test.operand
        return (dotted(inner) or "").rsplit(".", 1)[-1].lstrip("_").startswith("is_cuda")
    if kind is ast.Compare:
        if len(test.ops) != 1:
            return False
        op, right = type(test.ops[0]), test.comparators[0]
        if op is ast.Eq:
            return any(type(s) is ast.Constant and s.value in OTHER_DEVICES for s in (test.left, right))
        return op is ast.In and type(right) in (ast.Tuple, ast.List, ast.Set) and bool(right.elts) and all(
            type(s) is ast.Constant and s.value in OTHER_DEVICES for s in right.elts)
    if kind is ast.Call:
        test = test.func
    name = dotted(test) if type(test) in (ast.Name, ast.Attribute) else None
    return bool(name) and bool(OTHER_BACKEND.match(name.rsplit(".", 1)[-1]))


def per_call_statements(fn: ast.FunctionDef | ast.AsyncFunctionDef,
                        setters: dict[str, set[str]] | None = None) -> list[ast.stmt]:
    """The statements of ``fn`` that run on every call. A lazy initialiser returns what it cached
    once it has it (``if _workspace is not None: return _workspace``, ``if key in cache: return
    cache[key]``, ``if hasattr(self, "_layout"): return self._layout``, ``if self._key == key:
    return``) and fills the cache below, itself or through a method of its class (``setters``: each
    method's assigned ``self`` attributes): what follows that guard runs once (per key)."""
    body = fn.body
    for i, stmt in enumerate(body):
        if type(stmt) is ast.If and stmt.body and type(stmt.body[-1]) is ast.Return and _cached(
                stmt.test, body[i + 1:], setters, body[:i]):
            return body[:i + 1]
    return body


def _self_assigned(fn: ast.FunctionDef | ast.AsyncFunctionDef, types: dict[str, str | None] | None = None) -> set[str]:
    """The ``self.x`` a method assigns (``self.x = ...``, ``self.x[k] = ...``), as dotted text. With
    ``types``, each attribute assigned whole also gets what the assignment shows of its type
    (``self.cache = BufferCache(...)``, ``self.view: CacheView = ...``, ``self.timer = timer`` of
    ``timer: Timer``; ``value_type``), None where two assignments disagree or one shows nothing."""
    out = set()
    typed = _annotated_params(fn) if types is not None else {}
    for node in _own_nodes(fn):
        kind = type(node)
        targets = node.targets if kind is ast.Assign else [node.target] if kind in (
            ast.AnnAssign, ast.AugAssign) else []
        for t in targets:
            for el in (t.elts if type(t) is ast.Tuple else [t]):
                whole = type(el) is ast.Attribute
                el = el.value if type(el) is ast.Subscript else el
                text = dotted(el) if type(el) is ast.Attribute else None
                if text and text.startswith("self."):
                    out.add(text)
                    if types is not None and whole and kind is not ast.AugAssign and text.count(".") == 1:
                        attr = text[5:]
                        found = annotated_class(node.annotation) if kind is ast.AnnAssign else None
                        if found is None and node.value is not None and type(t) is not ast.Tuple:
                            found = value_type(node.value, typed)
                        if found is None and kind is ast.Assign and type(node.value) is ast.Constant \
                                and node.value.value is None:
                            continue  # ``self.cache = None`` before it is built: says nothing
                        types[attr] = found if types.get(attr, found) == found else None
    return out


def _cached(test: ast.expr, rest: list[ast.stmt], setters: dict[str, set[str]] | None = None,
            before: list[ast.stmt] = ()) -> bool:
    """Whether ``test`` asks that a cache is filled (``x is not None``, ``k in cache``, ``x``,
    ``hasattr(self, "x")``, ``self.key == key``, and ``or``/``and`` of those) and the statements in
    ``rest`` fill it, or call a method of the class that does (``self._set_layout(...)``). A local
    looked up in a cache by the statements ``before`` the test (``hit = _CACHE.get(key)``, ``hit =
    self._plans[key]``) stands for that cache."""
    tested: set[str] = set()
    parts = test.values if type(test) is ast.BoolOp else [test]
    for part in reversed(parts):
        if type(part) is ast.Compare and len(part.ops) == 1 and type(part.ops[0]) in (ast.IsNot, ast.In):
            target = part.left if type(part.ops[0]) is ast.IsNot else part.comparators[0]
        elif type(part) is ast.Compare and len(part.ops) == 1 and type(part.ops[0]) is ast.Eq and any(
                type(x) is ast.Attribute and (dotted(x) or "").startswith("self.") for x in (part.left, *part.comparators)):
            # ``self._key == key``: the stored key of what was computed last
            target = next(x for x in (part.left, *part.comparators) if type(x) is ast.Attribute)
        elif type(part) is ast.Call and type(part.func) is ast.Name and part.func.id == "hasattr" and len(part.args) == 2 \
                and type(part.args[1]) is ast.Constant and type(part.args[1].value) is str:
            head = dotted(part.args[0])
            target = None
            if head:
                tested.add(f"{head}.{part.args[1].value}")
        elif type(part) in (ast.Name, ast.Attribute):
            target = part
        else:
            continue
        name = dotted(target) if target is not None else None
        if name:
            tested.add(name)
    if not tested:
        return False
    for stmt in before:  # ``hit = cache.get(key)`` above ``if hit is not None: return hit``
        if type(stmt) is ast.Assign and len(stmt.targets) == 1 and type(stmt.targets[0]) is ast.Name \
                and stmt.targets[0].id in tested:
            value = stmt.value
            looked = value.func.value if type(value) is ast.Call and type(value.func) is ast.Attribute \
                and value.func.attr == "get" else value.value if type(value) is ast.Subscript else None
            if looked is not None and dotted(looked):
                tested.add(dotted(looked))
    for stmt in rest:
        for node in ast_nodes([stmt]):
            targets = node.targets if type(node) is ast.Assign else [node.target] if type(node) is ast.AnnAssign else []
            for t in targets:
                for el in (t.elts if type(t) is ast.Tuple else [t]):
                    el = el.value if type(el) is ast.Subscript else el
                    if dotted(el) in tested:
                        return True
            if setters and type(node) is ast.Call and type(node.func) is ast.Attribute and type(node.func.value) is ast.Name \
                    and node.func.value.id == "self" and setters.get(node.func.attr, set()) & tested:
                return True  # ``self._set_layout(...)`` assigns what the guard tests
    return False


class Resolver:
    """``resolve(path, owner, call)``: the project function ``(path, "f" or "Cls.m")`` that the
    call text ``call`` in ``owner`` (a function of the file at ``path``) names, or None.

    Resolved: same-module functions and methods (``f()``, ``self.m()``, ``Cls.m()``, a parameter
    annotated with the class), imported functions and classes' methods (``from .ops import f``,
    ``import pkg.ops as ops; ops.f()``, ``harness.Timer.median_us``). A module is found by its
    dotted name, any dotted suffix of it that names one file only (a ``src/`` layout), or a suffix of
    the imported name (a package installed under another name than its folder's)."""

    def __init__(self, files: dict[str, FileFacts]) -> None:
        self.files = files
        self.memo: dict[tuple[str, str, str], tuple[str, str] | None] = {}
        self._class_names: dict[str, set[str]] = {}
        self._modules: dict[str, str | None] = {}
        self.by_module = {f.module: path for path, f in files.items()}
        suffixes: dict[str, str | None] = {}
        for module, path in self.by_module.items():
            parts = module.split(".")
            for k in range(1, len(parts)):
                key = ".".join(parts[k:])
                suffixes[key] = None if key in suffixes and suffixes[key] != path else path
        for key, path in suffixes.items():
            if path is not None:
                self.by_module.setdefault(key, path)

    def module_path(self, module: str) -> str | None:
        if module not in self._modules:
            parts = module.split(".")
            self._modules[module] = next((found for k in range(len(parts))
                                          if (found := self.by_module.get(".".join(parts[k:]))) is not None), None)
        return self._modules[module]

    def __call__(self, path: str, owner: str, call: str) -> tuple[str, str] | None:
        key = (path, owner if call.startswith(("self.", "cls.", "(")) else "", call)
        if key not in self.memo:
            self.memo[key] = self._resolve(path, owner, call)
        return self.memo[key]

    def _resolve(self, path: str, owner: str, call: str) -> tuple[str, str] | None:
        facts = self.files[path]
        if call.startswith("("):  # ``(C).m``: a method of what the call ``C(...)`` returned (``value_type``)
            close = call.rfind(")")
            inner, rest = call[1:close], call[close + 1:]
            if close < 0 or not rest.startswith(".") or "." in rest[1:]:
                return None
            return self._method_of_result(path, owner, inner, rest[1:], 0)
        head, _, rest = call.partition(".")
        if head in ("self", "cls") and rest and "." not in rest and owner:
            klass = owner.rsplit(".", 1)[0] if "." in owner else owner
            return self._method(path, klass, rest, 0)  # its own class's, or one it inherits
        if call in facts.calls:  # ``f()``, ``Cls.m()``
            return path, call
        qualified = facts.imports.get(head)
        if qualified is not None:
            parts = (f"{qualified}.{rest}" if rest else qualified).split(".")
            for cut in range(len(parts) - 1, max(0, len(parts) - 3), -1):  # ``mod.f`` or ``mod.Cls.m``
                target_path = self.module_path(".".join(parts[:cut]))
                fn = ".".join(parts[cut:])
                if target_path is not None and fn in self.files[target_path].calls:
                    return target_path, fn
        klass, dot, method = call.rpartition(".")
        if dot and klass:  # ``Cls.m`` of a class whose base defines ``m``
            where = self._class(path, klass)
            if where is not None:
                return self._method(*where, method, 1)
        return None

    def _classes(self, path: str) -> set[str]:
        found = self._class_names.get(path)
        if found is None:
            facts = self.files[path]
            found = self._class_names[path] = {k.split(".", 1)[0] for k in facts.calls if "." in k} | set(facts.bases)
        return found

    def _class(self, path: str, text: str) -> tuple[str, str] | None:
        """Where the class named ``text`` in the file at ``path`` is defined: ``(path, "Cls")``."""
        if text in self._classes(path):
            return path, text
        head, _, rest = text.partition(".")
        qualified = self.files[path].imports.get(head)
        if qualified is None:
            return None
        module, _, name = (f"{qualified}.{rest}" if rest else qualified).rpartition(".")
        target = self.module_path(module) if module else None
        return (target, name) if target is not None and name in self._classes(target) else None

    def _method(self, path: str, klass: str, method: str, depth: int) -> tuple[str, str] | None:
        """``klass.method`` in the file at ``path``, or the method a base of it defines (a few levels)."""
        if f"{klass}.{method}" in self.files[path].calls:
            return path, f"{klass}.{method}"
        if depth >= 3:
            return None
        for base in self.files[path].bases.get(klass, ()):
            where = self._class(path, base)
            if where is not None and where != (path, klass):
                hit = self._method(*where, method, depth + 1)
                if hit is not None:
                    return hit
        return None

    def _method_of_result(self, path: str, owner: str, inner: str, method: str, depth: int) -> tuple[str, str] | None:
        """``method`` of what the call text ``inner`` returns: of the class it builds (``CacheView(...)``),
        or of what the project function it calls returns (``cache.get_view(...)`` of a method annotated
        ``-> CacheView`` or ending in ``return CacheView(...)``)."""
        where = self._class(path, inner)
        if where is not None:
            return self._method(*where, method, 0)
        target = self(path, owner, inner)
        if target is None or depth >= 2:
            return None
        shown = self.files[target[0]].returns.get(target[1])
        if shown is None:
            return None
        if shown.startswith("("):
            return self._method_of_result(target[0], target[1], shown[1:-1], method, depth + 1)
        where = self._class(target[0], shown)
        return self._method(*where, method, 0) if where is not None else None


HOST_TIMER_LASTS = {name.rsplit(".", 1)[-1] for name in HOST_TIMERS}
CLOCK_LASTS = HOST_TIMER_LASTS | BENCH_TIMERS | {"elapsed_time"}


def _last(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def measuring(files: dict[str, FileFacts], resolve: Resolver | None = None) -> set[tuple[str, str]]:
    """Every project function ``(path, name)`` that times (:func:`_measuring`)."""
    return _measuring(files, resolve or Resolver(files))[0]


def _measuring(files: dict[str, FileFacts], resolve: Resolver) -> tuple[set[tuple[str, str]], dict]:
    """Every project function ``(path, name)`` that times something: it reads a host timer twice,
    reads CUDA events' ``elapsed_time``, calls a benchmark timer (``do_bench``), or calls a function
    that does. A host-timer window around a call of one times a job of measurements, not GPU work.
    Also every call in the project by its last name (``spelled``)."""
    found: set[tuple[str, str]] = set()
    for path, facts in files.items():
        for name, calls in facts.calls.items():
            timers = 0
            for call in calls:
                last = call.rpartition(".")[2]
                if last not in CLOCK_LASTS:
                    continue
                if last == "elapsed_time" or last in BENCH_TIMERS:
                    timers += 2
                elif last in HOST_TIMER_LASTS:
                    head, dot, rest = call.partition(".")
                    timers += f"{facts.imports.get(head, head)}{dot}{rest}" in HOST_TIMERS
            if timers >= 2:
                found.add((path, name))
    # callers of a timing function time too: resolve only the calls spelled like one (by its last name)
    spelled: dict[str, list[tuple[str, str, str]]] = {}
    for path, facts in files.items():
        for name, calls in facts.calls.items():
            for call in calls:
                spelled.setdefault(call.rpartition(".")[2], []).append((path, name, call))
    queue = deque(found)
    while queue:
        target = queue.popleft()
        for path, name, call in spelled.get(_last(target[1]), ()):
            if (path, name) not in found and resolve(path, name, call) == target:
                found.add((path, name))
                queue.append((path, name))
    return found, spelled


def timing_calls(files: dict[str, FileFacts], resolve: Resolver | None = None) -> dict[str, tuple[str, ...]]:
    """File path -> the call texts in it that call a project function which times (:func:`measuring`)."""
    resolve = resolve or Resolver(files)
    timing, spelled = _measuring(files, resolve)
    out: dict[str, set[str]] = {}
    for last in {name.rpartition(".")[2] for _, name in timing}:
        for path, name, call in spelled.get(last, ()):
            if resolve(path, name, call) in timing:
                out.setdefault(path, set()).add(call)
    return {path: tuple(sorted(calls)) for path, calls in out.items()}


def imported_constants(files: dict[str, FileFacts], resolve: Resolver | None = None) -> dict[str, tuple[str, ...]]:
    """File path -> the names it imports that are another project module's numeric constants
    (``from .ops import SPARSE_BLOCK_SIZE``): numbers on the host, like the module's own."""
    module_path = (resolve or Resolver(files)).module_path
    out: dict[str, tuple[str, ...]] = {}
    for path, facts in files.items():
        found = set()
        for local, qualified in facts.imports.items():
            module, _, name = qualified.rpartition(".")
            target = module_path(module) if module else None
            if target is not None and name in files[target].constants:
                found.add(local)
        if found:
            out[path] = tuple(sorted(found))
    return out


def options_off(files: dict[str, FileFacts], resolve: Resolver | None = None) -> dict[str, tuple[tuple[str, str], ...]]:
    """File path -> ``(function, option)`` for the options (parameters defaulting to ``False``) of
    functions that the project calls and never turns on: no call passes the option by keyword or by
    position a value that may be true. Code under ``if option:`` in such a function is a debug or
    opt-in path, not what the callers run."""
    resolve = resolve or Resolver(files)
    called: set[tuple[str, str]] = set()
    on: set[tuple[str, str, str]] = set()
    # ``f(**kwargs)`` passes along what its own callers gave: an option is on through it when some
    # call in the project names it
    named = {kw for facts in files.values() for passes in facts.passes.values() for _, _, kws in passes for kw in kws}
    with_options = {_last(name) for facts in files.values() for name in facts.options}
    for path, facts in files.items():
        for name, calls in facts.calls.items():
            passes = {text: [] for text in calls if _last(text) in with_options}
            if not passes:
                continue
            for text, count, keywords in facts.passes.get(name, ()):
                if text in passes:
                    passes[text].append((count, keywords))
            for text in passes:
                hit = resolve(path, name, text)
                if hit is None or hit[1] not in files[hit[0]].options:
                    continue
                called.add(hit)
                options = files[hit[0]].options[hit[1]]
                offset = 1 if "." in hit[1] else 0  # a method's first parameter is bound (``self.m(x)``)
                for count, keywords in passes[text]:
                    for option, index in options.items():
                        if option in keywords or "**" in keywords and option in named or offset <= index < count + offset:
                            on.add((*hit, option))
    out: dict[str, list[tuple[str, str]]] = {}
    for path, name in called:
        for option in files[path].options[name]:
            if (path, name, option) not in on:
                out.setdefault(path, []).append((name, option))
    return {path: tuple(sorted(found)) for path, found in out.items()}


def called_plainly(files: dict[str, FileFacts], resolve: Resolver | None = None) -> dict[str, tuple[str, ...]]:
    """File -> its top-level Triton functions that a function of the project calls by name (``f(x)``,
    not a launch ``f[grid](x)``, which the index does not record as a call): a device helper inlined
    into the kernel that calls it, not a kernel."""
    resolve = resolve or Resolver(files)
    kernels = {name for facts in files.values() for name in facts.kernels}
    out: dict[str, set[str]] = {}
    for path, facts in files.items():
        for name, calls in facts.calls.items():
            for text in {c for c in calls if _last(c) in kernels}:  # resolving every call costs memory
                hit = resolve(path, name, text)
                if hit is not None and "." not in hit[1]:
                    out.setdefault(hit[0], set()).add(hit[1])
    return {path: tuple(sorted(found)) for path, found in out.items()}


def kernel_loading(files: dict[str, FileFacts], resolve: Resolver | None = None
                   ) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
    """File -> the names it imports from a module of the project whose import loads a kernel
    (``FileFacts.loads_kernels``, or a call its import runs into a project function that calls a
    kernel loader: ``moe = load_kernel("moe")`` at the top of ``layers/moe/unquantized.py``), directly
    or through a package that re-exports them. ``from .unquantized import fused_moe`` under a broad
    ``except`` swallows that kernel's load failure whatever the name says. Second: file -> what it
    imports (qualified, as ``FileFacts.imports`` holds it) from project modules that have nothing to
    do with kernels: their import loads none, no function of theirs builds one, and they import no
    kernel module or library from outside the project (``from little_kernel.ir import Node``: a code
    generator's own module, whatever the package is called). Third: file -> the names it imports
    that are project functions launching a kernel in their own body (``FileFacts.launches``:
    ``flash_d512`` whose body runs ``_kernel[grid](...)``), through a package's re-export too."""
    resolve = resolve or Resolver(files)

    def builds(rel: str, fn: str) -> bool:
        imports = files[rel].imports
        return any(kernel_loader(_qualified(imports, c)) for c in files[rel].calls.get(fn, ()))

    loading = {rel for rel, f in files.items() if f.loads_kernels or any(
        (found := resolve(rel, "", c)) is not None and builds(*found) for c in f.module_calls)}

    def module_of(name: str) -> str | None:  # a project module by its full name, or a dotted suffix of
        # one (a ``src/`` layout) when the name has a package part: ``transformers`` alone is not
        # the project's ``models/transformers.py``; or, for a package installed under another name
        # than its folder's (``kt_kernel.cli.utils.console`` from ``kt-kernel/python/cli/utils/``),
        # what follows the package's name when that still has a package part
        if "." not in name:
            return exact.get(name)
        found = resolve.by_module.get(name)
        rest = name.split(".", 1)[1]
        return found if found is not None or rest.count(".") < 1 else resolve.by_module.get(rest)

    exact = {f.module: rel for rel, f in files.items()}

    def reexport(target: str, qualified: str) -> str | None:
        """What the module ``target`` binds the last name of ``qualified`` to by importing it from
        elsewhere (a package's ``from .kmod import f``), or None."""
        again = files[target].imports.get(qualified.rpartition(".")[2])
        return again if again is not None and again != qualified else None

    def loads(qualified: str, hops: int = 1) -> bool | None:  # None: not a module of the project
        target = module_of(qualified)  # ``import pkg.kmod as km``
        if target is not None:
            return target in loading
        target = module_of(qualified.rpartition(".")[0])
        if target is None:
            return None
        if target in loading:
            return True
        again = reexport(target, qualified)
        return bool(loads(again, hops - 1)) if hops > 0 and again is not None else False

    def external(qualified: str) -> bool:
        return module_of(qualified) is None and module_of(qualified.rpartition(".")[0]) is None

    def wraps_kernel(rel: str, fn: str) -> bool:  # builds a kernel, calls a custom op, or a project function that builds
        owner = fn.rsplit(".", 1)[0] if "." in fn else ""
        for c in files[rel].calls.get(fn, ()):
            q = _qualified(files[rel].imports, c)
            if kernel_loader(q) or custom_op(q):
                return True
            hit = resolve(rel, owner, c)
            if hit is not None and hit[0] != rel and builds(*hit):
                return True
        return False

    touching: dict[str, bool] = {}

    def touches(rel: str, depth: int = 3) -> bool:  # builds, imports or wraps a kernel, or imports a module that does
        if rel in touching:
            return touching[rel]
        touching[rel] = False  # an import cycle adds nothing
        f = files[rel]
        # a module-level ``__getattr__`` serves names imported from elsewhere at run time (PEP 562): unknown
        found = rel in loading or "__getattr__" in f.calls or any(wraps_kernel(rel, fn) for fn in f.calls) or any(
            external(q) and kernel_module(q) for q in f.imports.values())
        if not found and depth > 0:
            for q in f.imports.values():
                target = module_of(q) or module_of(q.rpartition(".")[0])
                if target is not None and target != rel and touches(target, depth - 1):
                    found = True
                    break
        touching[rel] = found
        return found

    def plain_module(qualified: str, hops: int = 1) -> bool:
        target = module_of(qualified)
        if target is None:
            target = module_of(qualified.rpartition(".")[0])
            if target is None:
                return False
            again = reexport(target, qualified)  # a package's re-export: judge where it comes from
            if hops > 0 and again is not None and not external(again):
                return not touches(target) and plain_module(again, hops - 1)
        return not touches(target)

    launching: dict[tuple[str, str], bool] = {}

    def launches_in(rel: str, fn: str, depth: int = 3) -> bool:  # it or what it calls launches a kernel
        key = (rel, fn)
        if key in launching:
            return launching[key]
        launching[key] = False  # recursion adds nothing
        facts = files[rel]
        found = fn in facts.launches
        owner = fn.rsplit(".", 1)[0] if "." in fn else ""
        for c in facts.calls.get(fn, ()) if not found and depth > 0 else ():
            head, _, last = c.rpartition(".")
            hit = (rel, f"{head}.forward") if last == "apply" and head in facts.bases else resolve(rel, owner, c)
            if hit is not None and hit[1] in files[hit[0]].calls and launches_in(*hit, depth - 1):
                found = True  # ``flash_d512()`` -> ``_FlashD512.apply()`` -> its forward's launch
                break
        launching[key] = found
        return found

    def launcher(qualified: str, hops: int = 1) -> bool:  # a function of the project that launches a kernel
        module, _, name = qualified.rpartition(".")
        target = module_of(module)
        if target is None:
            return False
        if name in files[target].calls and launches_in(target, name):
            return True
        again = reexport(target, qualified)
        return hops > 0 and again is not None and launcher(again, hops - 1)

    out, plain, entries = {}, {}, {}
    for rel, f in files.items():
        names = tuple(sorted(local for local, qualified in f.imports.items() if loads(qualified)))
        if names:
            out[rel] = names
        # only where a name would say otherwise: a module named like a kernel's (``little_kernel``)
        found = tuple(sorted({q for q in f.imports.values()
                              if (kernel_module(q) or kernel_module(q.rpartition(".")[0])) and plain_module(q)}))
        if found:
            plain[rel] = found
        names = tuple(sorted(local for local, qualified in f.imports.items() if launcher(qualified)))
        if names:
            entries[rel] = names
    return out, plain, entries


# A kernel by its name where the index cannot follow it: a local bound to one of several
# (``kernel = _fwd_kernel if causal else _fwd_kernel_nc``), an attribute (``self.kernel[grid]``).
KERNEL_NAME = re.compile(r"kernel", re.I)


def op_kernel(files: dict[str, FileFacts], resolve: Resolver, path: str, launched: str) -> bool:
    """Whether what a function of the file at ``path`` launches (``FileFacts.launches``) is a
    kernel: a custom op, a Triton kernel of the project (``@triton.jit``, here or imported), or
    named as one (``KERNEL_NAME``) where it is not a project function; ``handlers[k](...)`` or
    ``list[str]()`` is not."""
    if custom_op(launched):
        return True
    hit = resolve(path, "", launched) if "." not in launched or launched.split(".")[0] in files[path].imports else None
    if hit is not None:
        return hit[1] in files[hit[0]].kernels
    return bool(KERNEL_NAME.search(launched.rsplit(".", 1)[-1]))


def _followed_in_module(call: str) -> bool:
    """Whether the module model follows a call from a hot path itself (``helper()``, ``self.m()``:
    ``ModuleModel.callee``); a method of an object (``cache.update()``, ``Cls.m()``) only the index
    resolves, so the function it reaches in the same module is marked per step too."""
    return "." not in call or call.count(".") == 1 and call.startswith(("self.", "cls."))


SCRIPT = "<module>"  # a caller that is a module's own top-level code (a ``__main__`` block, a script's body)


class Callers:
    """Who calls a function, where the project shows it: ``of(path, name)`` gives the resolved
    calls of ``name`` (``(path, function)``, or ``(path, SCRIPT)`` for a module's top-level code),
    found through the call texts that end with its name (the index resolves only those). The table
    of call texts is built on the first question."""

    def __init__(self, files: dict[str, FileFacts], resolve: Resolver) -> None:
        self.files, self.resolve = files, resolve
        self.by_last: dict[str, list[tuple[str, str, str]]] | None = None  # last name -> (path, caller, call text)
        self.memo: dict[tuple[str, str], bool] = {}

    def of(self, path: str, name: str) -> set[tuple[str, str]]:
        if self.by_last is None:
            self.by_last = {}
            for fpath, facts in self.files.items():
                for caller, calls in facts.calls.items():
                    for text in set(calls):
                        self.by_last.setdefault(_last(text), []).append((fpath, caller, text))
                for text in facts.module_calls:
                    self.by_last.setdefault(_last(text), []).append((fpath, SCRIPT, text))
        found = set()
        for cpath, caller, text in self.by_last.get(_last(name), ()):
            owner = caller.rsplit(".", 1)[0] if "." in caller else ""
            if self.resolve(cpath, "" if caller == SCRIPT else owner, text) == (path, name):
                found.add((cpath, caller))
        return found

    def only_off_the_step(self, path: str, name: str, depth: int = 0) -> bool:
        """Whether every call of a function the project shows is off the serving step: each caller is
        a module's top-level code (a demo ``run()`` under ``if __name__ == "__main__":``), training
        (an autograd ``backward``: ``function_context``'s training reasons), or a function called
        only from such places itself. A function no code of the project calls is an API: False."""
        key = (path, name)
        if key not in self.memo:
            self.memo[key] = False  # (a cycle of calls proves nothing)
            found = self.of(path, name) if depth < MAX_DEPTH else set()
            self.memo[key] = bool(found) and all(
                caller == SCRIPT or self.files[cpath].contexts.get(caller, "").startswith("training")
                or self.only_off_the_step(cpath, caller, depth + 1) for cpath, caller in found)
        return self.memo[key]


def per_step(files: dict[str, FileFacts], hot_path_names: tuple[str, ...],
             resolve: Resolver | None = None) -> dict[str, dict[str, str]]:
    """Phase two: file path -> {function ("f" or "Cls.m") -> why it runs every step}.

    The entry points themselves are included, with the reason "a per-step entry point"."""
    entry = hot_path_matcher(tuple(hot_path_names))
    resolve = resolve or Resolver(files)

    def is_entry(name: str) -> bool:  # as Config.is_hot_path
        parts = name.split(".")
        return entry(parts[-1]) is not None or len(parts) > 1 and entry(".".join(parts[-2:])) is not None

    def once(path: str, name: str) -> bool:
        """Whether a function runs once per input or on another platform, not every step."""
        owner = name.rsplit(".", 1)[0] if "." in name else ""
        short = name.rsplit(".", 1)[-1]
        return (once_per_input(owner, path) or bool(ENCODER_PATH.search(path)) or bool(OTHER_PLATFORM.search(path))
                or bool(MULTIMODAL_HELPER.search(short)))

    out: dict[str, dict[str, str]] = {}
    queue: deque[tuple[str, str, int]] = deque()
    seeds: list[tuple[str, str, str]] = []  # (path, function, call) for the calls in step loops
    for path, facts in files.items():
        if NOT_SERVING_PATH.search(path):
            continue
        for name in facts.calls:
            if name in facts.contexts or once(path, name):
                continue
            if is_entry(name):
                out.setdefault(path, {})[name] = ENTRY
                queue.append((path, name, 0))
            elif name.endswith(".__call__") and ATTENTION_PROCESSOR.search(name.rsplit(".", 2)[-2]):
                out.setdefault(path, {})[name] = PROCESSOR_CALL
                queue.append((path, name, 0))
            elif name in facts.step_calls:  # not those in an except handler or a cache fill (not in ``calls``)
                known = set(facts.calls[name])
                seeds.extend((path, name, call) for call in facts.step_calls[name] if call in known)
    callers = Callers(files, resolve)
    for path, facts in files.items():  # an op: what launches a kernel runs on every call of the op
        if NOT_SERVING_PATH.search(path):
            continue
        for name, launched in facts.launches.items():
            if name in out.get(path, {}) or name in facts.contexts or once(path, name) \
                    or ONE_TIME.match(name.rsplit(".", 1)[-1]):
                continue
            kernel = next((k for k in launched if op_kernel(files, resolve, path, k)), None)
            if kernel is not None and not callers.only_off_the_step(path, name):
                out.setdefault(path, {})[name] = f"it launches {kernel}, so it runs on every call of its op"
                queue.append((path, name, 0))
    for path, name, call in seeds:  # what a loop over steps calls runs every step
        owner = name.rsplit(".", 1)[0] if "." in name else ""
        hit = resolve(path, owner, call)
        if hit is None or hit == (path, name) or hit[1] in out.get(hit[0], {}):
            continue
        tpath, tname = hit
        if ONE_TIME.match(tname.rsplit(".", 1)[-1]) or NOT_SERVING_PATH.search(tpath) or once(tpath, tname) \
                or tname in files[tpath].contexts:
            continue
        # a same-module helper is followed by the module model from the loop itself
        out.setdefault(tpath, {})[tname] = INDIRECT if tpath == path and _followed_in_module(call) else \
            f"called in the step loop of {files[path].module}.{name}()"
        queue.append((tpath, tname, 1))
    while queue:
        path, name, depth = queue.popleft()
        if depth >= MAX_DEPTH:
            continue
        owner = name.rsplit(".", 1)[0] if "." in name else ""
        for call in files[path].calls.get(name, ()):
            hit = resolve(path, owner, call)
            if hit is None:
                continue
            tpath, tname = hit
            if ONE_TIME.match(tname.rsplit(".", 1)[-1]) or NOT_SERVING_PATH.search(tpath) or once(tpath, tname) \
                    or tname in files[tpath].contexts:
                continue  # one-time, training, calibration or memoized work (``function_context``)
            if tname in out.get(tpath, {}):
                if out[tpath][tname] == INDIRECT and not (tpath == path and _followed_in_module(call)):
                    out[tpath][tname] = f"called every step from {files[path].module}.{name}()"
                continue
            where = files[path].module
            if tpath != path or not _followed_in_module(call):
                # same-module helpers: the module model follows those from its hot paths
                out.setdefault(tpath, {})[tname] = f"called every step from {where}.{name}()"
            else:
                out.setdefault(tpath, {})[tname] = INDIRECT
            queue.append((tpath, tname, depth + 1))
    return out


# -- the engine's side: facts for every file, cached, and each job's per-step functions ----------------


def scope_answers(rel: str, facts: FileFacts | None) -> dict:
    """The configuration fields that carry the index's answers per function of one file to the rules
    (``contexts``, ``step_loops``, ``indexed``); nothing known when the file has no facts."""
    if facts is None:
        return {"contexts": (), "step_loops": (), "indexed": False}
    everywhere = module_context(rel)
    return {"contexts": (("*", everywhere),) if everywhere else tuple(sorted(facts.scope_contexts.items())),
            "step_loops": tuple(sorted(facts.step_loops.items())), "indexed": True}


def file_answers(tree: ast.Module, rel: str) -> dict:
    """What the index answers from one file alone, for a file checked with no index (text given
    on stdin, a fixture): the demands its calls meet in the same module, and its lazy
    initialisers' guards."""
    facts = {rel: file_facts(tree, rel)}
    return {"demands": contracts.call_demands(facts, Resolver(facts)).get(rel, ()),
            "once_after": tuple(sorted(facts[rel].once_after.items()))}


def _facts_of(path: str, rel: str) -> FileFacts | None:
    try:
        with open(path, "rb") as fh:
            data = fh.read()
        if chunks.is_large(data):
            facts = facts_in_chunks(data, rel)
            if facts is not None:
                return facts
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(data)
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return file_facts(tree, rel)


def facts_in_chunks(data: bytes, rel: str, chunk: int | None = None) -> FileFacts | None:
    """The facts of a large file read in chunks of top-level statements (:mod:`kcheck.chunks`), the
    same as :func:`file_facts` of its whole tree; None when the file must be parsed whole (another
    encoding than UTF-8, a chunk that does not parse).

    :func:`file_facts` walks the top-level statements last first, each one's subtree whole: the walk
    of the whole tree is the walks of the chunks, last chunk first. Merging the chunks' facts in that
    order (a later assignment wins, calls appended) gives the same facts, in the same order."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        if encoding not in ("utf-8", "utf-8-sig"):
            return None
        text = data.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError):
        return None
    def read(piece: str, line: int, first: bool) -> tuple[FileFacts, dict[str, str]]:
        tree = chunks.parse(piece)  # parsed from line 1 (no padding), the few facts that hold lines moved
        return _shift_lines(file_facts(tree, rel), line - 1), answered_reads(tree, None)

    parts = chunks.each(text, read, chunk)
    if parts is None:
        return None
    facts = FileFacts(module_name(rel))
    for part, _ in reversed(parts):
        facts.imports.update(part.imports)
        for name, calls in part.calls.items():
            facts.calls.setdefault(name, []).extend(calls)
        facts.once_after.update(part.once_after)
        facts.constants.update(part.constants)
        facts.options.update(part.options)
        facts.nullable.update(part.nullable)
        for name, launched in part.launches.items():
            facts.launches.setdefault(name, []).extend(launched)
        facts.kernels |= part.kernels
        facts.params.update(part.params)
        facts.scope_contexts.update(part.scope_contexts)
        facts.returns.update(part.returns)
        facts.bases.update(part.bases)
        facts.step_loops.update(part.step_loops)
        facts.demands.update(part.demands)
        for name, calls in part.forwards.items():
            facts.forwards.setdefault(name, []).extend(calls)
        for name, passes in part.passes.items():
            before = facts.passes.setdefault(name, [])
            for i, mark in part.hosts.get(name, {}).items():
                facts.hosts.setdefault(name, {})[len(before) + i] = mark
            for i, mark in part.nones.get(name, {}).items():
                facts.nones.setdefault(name, {})[len(before) + i] = mark
            before.extend(passes)
    for _, reads in reversed(parts):  # by local name: a chunk alone does not see the file's imports
        for local, how in reads.items():
            qualified = facts.imports.get(local, "")
            if "." in qualified:
                facts.reads[qualified] = _weakest(facts.reads.get(qualified, how), how)
    return facts


def _shift_lines(facts: FileFacts, by: int) -> FileFacts:
    """A chunk's facts with the lines they hold (``demands``) moved to the chunk's place in its file."""
    if by:
        facts.demands = {name: tuple((p, prop, line + by) for p, prop, line in found)
                         for name, found in facts.demands.items()}
    return facts


def _facts_chunk(items: list[tuple[str, str]]) -> list[FileFacts | None]:
    return [_facts_of(path, rel) for path, rel in items]


class FactsCache:
    """Each file's facts keyed on (size, mtime), one pair of files per kcheck code version in the
    cache folder: a one-file run reads the rest of the project's call graph from here.

    The index (``facts-<fingerprint>.pickle``) holds, per file, its stamp, path, the stamp at which
    its facts last changed and its lazy-initialiser guards, and the last walk; the facts themselves
    (``.data.pickle``) are read only when a run needs them: a warm run whose files and walk are
    unchanged never does."""

    def __init__(self, cache_root: str, fingerprint: str) -> None:
        self.path = os.path.join(cache_root, f"facts-{fingerprint}.pickle")
        self.data_path = os.path.join(cache_root, f"facts-{fingerprint}.data.pickle")
        try:
            with open(self.path, "rb") as fh:
                self.entries, self.walk = pickle.load(fh)
        except (OSError, pickle.PickleError, EOFError, AttributeError, ValueError, TypeError):
            # key -> (stamp, rel, since, once: the lazy initialisers' guards, or None for a file with no
            # facts, the index's answers per function: ``scope_answers``)
            self.entries: dict[str, tuple] = {}
            self.walk: tuple = ("", {})  # (digest of the facts and entry points it was made from, per_step's answer)
        self._facts: dict[str, FileFacts] | None = None
        self.dirty = self.data_dirty = False

    @property
    def facts(self) -> dict[str, FileFacts]:
        """Key -> facts, read from disk on first use."""
        if self._facts is None:
            try:
                with open(self.data_path, "rb") as fh:
                    self._facts = pickle.load(fh)
            except (OSError, pickle.PickleError, EOFError, AttributeError, ValueError, TypeError):
                self._facts = {}
        return self._facts

    def put(self, key: str, stamp, rel: str, facts: FileFacts | None, since) -> None:
        once = tuple(sorted(facts.once_after.items())) if facts is not None else None
        self.entries[key] = (stamp, rel, since, once, scope_answers(rel, facts))
        if facts is None:
            self.facts.pop(key, None)
        else:
            self.facts[key] = facts
        self.dirty = self.data_dirty = True

    def drop(self, key: str) -> None:
        del self.entries[key]
        if self._facts is not None:
            self._facts.pop(key, None)
            self.data_dirty = True
        self.dirty = True

    def save(self) -> None:
        """The facts first, then the index that points into them."""
        if self.data_dirty:
            self._write(self.data_path, self.facts)
        if self.dirty:
            self._write(self.path, (self.entries, self.walk))

    @staticmethod
    def _write(path: str, value) -> None:
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(tmp, "wb") as fh:
                pickle.dump(value, fh, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.remove(tmp)


def _stamp(path: str) -> tuple | None:
    """(size, mtime) of a regular file; None for anything else (a FIFO, a device, a missing file)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns) if stat.S_ISREG(st.st_mode) else None


def annotate(jobs: list, cache_root: str | None = None, fingerprint: str = "", workers: int = 1) -> list:
    """The jobs, each with the per-step functions of its file (and why) in its configuration.

    Every job's file is read for its facts (or taken from the cache when its size and time stamp
    match); with a cache, the facts of the project's other files seen by earlier runs join the
    call graph, so checking one file still sees the callers in the rest of the project."""
    if not jobs:
        return jobs
    cache = FactsCache(cache_root, fingerprint) if cache_root else None
    files: dict[str, FileFacts] = {}
    pending: dict[str, str] = {}  # rel -> cache key of facts still on disk (read when the walk is redone)
    once_of: dict[str, tuple] = {}  # rel -> its lazy initialisers' guards
    scoped: dict[str, dict] = {}  # rel -> the index's answers per function (``scope_answers``)
    todo: list[tuple[str, str]] = []
    stamps: dict[str, tuple | None] = {}
    for job in jobs:
        key = os.path.abspath(job.path)
        stamps[key] = _stamp(job.path)
        hit = cache.entries.get(key) if cache is not None else None
        if hit is not None and hit[0] == stamps[key] and hit[1] == job.rel:
            if hit[3] is not None:
                pending[job.rel], once_of[job.rel], scoped[job.rel] = key, hit[3], hit[4]
        elif stamps[key] is not None and stamps[key][0] <= job.config.max_file_size and not job.path.endswith(".ipynb"):
            # every file the engine reads as Python, ``extend-include``d ones (``*.py.txt``) too; what
            # it skips (oversized files) and notebooks (checked cell by cell) have no facts
            todo.append((job.path, job.rel))
    if workers > 1 and len(todo) >= 256:
        size = max(8, len(todo) // (workers * 8))
        chunks = [todo[i:i + size] for i in range(0, len(todo), size)]
        with ProcessPoolExecutor(max_workers=workers) as pool:
            results = [f for part in pool.map(_facts_chunk, chunks) for f in part]
    else:
        results = _facts_chunk(todo)
    for (path, rel), facts in zip(todo, results):
        if facts is not None:
            files[rel] = facts
            once_of[rel] = tuple(sorted(facts.once_after.items()))
            scoped[rel] = scope_answers(rel, facts)
        if cache is not None:
            key = os.path.abspath(path)
            old = cache.entries.get(key)
            same = old is not None and old[1] == rel and cache.facts.get(key) == facts
            # when the facts did not change (an edited comment or body line), the walk's digest does not either
            cache.put(key, stamps[key], rel, facts, old[2] if same else stamps[key])
    if cache is not None:
        scanned = {os.path.abspath(job.path) for job in jobs}
        for key, (stamp, rel, _since, once, _scoped) in list(cache.entries.items()):
            if key in scanned or once is None or rel in files or rel in pending:
                continue
            if _stamp(key) == stamp:
                pending[rel] = key
            else:  # changed or gone since: its facts are stale
                cache.drop(key)
    config = jobs[0].config
    steps = timing = constants = off = hosts = given = demanded = copied = loading = plain = entries = called = \
        answered = harness = None
    if cache is not None:  # a warm run whose files and entry points are unchanged reuses the last walk
        # the walk is a function of the facts: each file's path and the stamp at which its facts last
        # changed, and the entry points, decide it
        digest = hashlib.sha256(repr((sorted((key, since, rel) for key, (_, rel, since, *_) in cache.entries.items()),
                                      config.hot_path_functions)).encode()).hexdigest()
        if cache.walk[0] == digest:
            steps, timing, constants, off, hosts, given, demanded, copied, loading, plain, entries, called, answered, \
                harness = cache.walk[1]
    if steps is None:
        for rel, key in pending.items():  # the walk is redone: it needs every file's facts
            facts = cache.facts.get(key)
            if facts is None:  # the facts file lost it (an interrupted save): read the file again
                facts = _facts_of(key, rel)
                cache.put(key, cache.entries[key][0], rel, facts, cache.entries[key][2])
            if facts is not None:
                files[rel] = facts
        resolve = Resolver(files)
        steps, timing = per_step(files, config.hot_path_functions, resolve), timing_calls(files, resolve)
        constants, off = imported_constants(files, resolve), options_off(files, resolve)
        hosts, given = host_params(files, resolve), given_params(files, resolve)
        demanded = contracts.call_demands(files, resolve)
        copied, (loading, plain, entries) = copies(files), kernel_loading(files, resolve)
        called, answered = called_plainly(files, resolve), read_elsewhere(files, resolve)
        harness = harness_modules(files)
        if cache is not None:
            cache.walk = (digest, (steps, timing, constants, off, hosts, given, demanded, copied, loading, plain, entries,
                                   called, answered, harness))
            cache.dirty = True
    if cache is not None:
        cache.save()
    out = []
    for job in jobs:
        mine = tuple(sorted((name, why) for name, why in steps.get(job.rel, {}).items()
                            if why not in (ENTRY, INDIRECT) and not job.config.is_hot_path(name)))
        known = {"per_step": mine, "once_after": once_of.get(job.rel, ()), "measuring": timing.get(job.rel, ()),
                 "constants": constants.get(job.rel, ()), "options_off": off.get(job.rel, ()),
                 "host_params": hosts.get(job.rel, ()), "given_params": given.get(job.rel, ()), "demands": demanded.get(job.rel, ()),
                 "copy_of": copied.get(job.rel, ""), "kernel_imports": loading.get(job.rel, ()), "plain_imports": plain.get(job.rel, ()), "kernel_entries": entries.get(job.rel, ()), "called_plainly": called.get(job.rel, ()),
                 "read_elsewhere": answered.get(job.rel, ()), **scoped.get(job.rel, scope_answers(job.rel, None))}
        if job.rel in harness:  # the index's answer for the whole module (``harness_modules``)
            script = harness[job.rel]
            known["harness"] = script
            known["contexts"] = (("*", f"a helper that only {script.rpartition('/')[2]} beside it imports "
                                       f"({module_context(script)})"),)
        if any(getattr(job.config, key) != value for key, value in known.items()):
            job = replace(job, config=replace(job.config, **known))
        out.append(job)
    return out
