from __future__ import annotations

import ast
import re

import libcst as cst

from kcheck.gate import dotted
from kcheck.model import MEASUREMENT_FUNCTION, MEASUREMENT_PATH, TESTS, TimedRegion, waiting_read, walk
from kcheck.project import ENCODER_PATH, MULTIMODAL_HELPER, OTHER_PLATFORM, once_per_input
from kcheck.rule import Rule
from kcheck.values import HOST_NAME
from kcheck.rules.dispatch import SHIPPED_EXAMPLE
from kcheck.rules.timed_path import (
    first_in_statement,
    CLASSIFY, DEBUG_PATH, REFERENCE_PATH, SYNC_TEXT, FileView, context, native_wait_line, off_the_step, step_loops,
    through,
)


class HostSyncInHotPath(Rule):
    """A host sync in a function that runs every serving step.

    ## What it does
    Finds calls that make the CPU wait for the GPU (`.item()`, `.cpu()`, `.tolist()`,
    `torch.cuda.synchronize()`, `torch.nonzero`, one-argument `torch.where`, a read through a
    boolean mask: `x[mask]`, `x[scores > t]`, and Python reading a GPU tensor: `int(t)`,
    `float(t)`, `max(t)`, `if (t < 0).any():`, a branch on a comparison of its element: `if
    lens[i] > 0:`, `assert self.pos[0] + n <= size` with `pos` a registered buffer) in per-step
    hot paths:
    model-layer `forward` methods, decode and step functions, metadata builds, MoE `apply`
    methods (the names are configurable with `hot-path-functions`), a registered op's
    implementation, a function that launches a kernel (`kernel[grid](...)` of a Triton kernel, a
    custom op: a kernel library's op wrapper runs on every call of its op, whoever calls it, unless
    every call the project shows comes from a script's `__main__` block or from training, such as a
    helper only an autograd `backward` calls), an
    attention processor's `__call__` (`*AttnProcessor`, run by its attention layer's forward), the body of a loop over steps in any function (a pipeline's `for i, t in
    enumerate(timesteps):`, a generator's `while token_index_to_generate <= last:`, any loop that
    runs a model and picks the next token from its output), the functions
    the project index finds they call in other modules or through an object (a method of an
    attribute built in `__init__`, of a parameter annotated with a class, of what a method returns:
    `self.cache.update(...)`, `view = cache.get_view(i); view.update(...)`, a method a base class
    defines), and the same-module helpers they call. A
    sync in a helper is reported where it is written, once; the message names what made its
    function a hot path (its name, the step loop, or the call chain the index followed).
    Whether a tensor is on the host comes from the values model (`kcheck.values`); an unannotated
    parameter is a tensor when the function calls a method on it that only tensors have
    (`cu_seqlens.diff()`, `mask.unsqueeze(-1)`, `x.size(0)`), not one NumPy arrays share (`.all()`).

    Each function's context, and where its loops over steps are, is decided once by the project
    index (`kcheck.project.function_context`, `step_loops`), which this rule reads per function: code that is not serving is never a hot path, whatever its name or
    caller. Training (a method of an optimizer or a loss, a function named for training or
    `backward`, one that calls `.backward()`, `.zero_grad()` or an optimizer's `step()`, a
    training module: `training.py`, `trainer/`, `*_loss.py`), calibration observers
    (`*Observer`, `*Calibrator`), memoized builders (`@lru_cache`: once per distinct input),
    export, conversion, calibration and weight-loading modules (`export/`, `convert_*.py`,
    `model_loader/`, `loading/`), and tests, benchmarks, examples, scripts and tools by path.

    Not reported:
    - `.item()` on a tensor the function built on the CPU, or on a tensor or array named for the
      host (`seq_lens_cpu.tolist()`, `host_positions.tolist()`, `starts_np.tolist()`), or on a
      multimodal input the file declares host-resident (`image_grid_thw=MultiModalFieldConfig.
      batched("image", keep_on_cpu=True)` makes `image_grid_thw` and `grid_thw` host tensors;
      `grid_thw` itself is host-resident by the convention of vLLM and SGLang);
    - a sync the code declares deliberate (inside `with gpu_sync_allowed():` or a similar
      `allow_sync` block), or takes only for a caller that passed a tensor where a list or an int
      would do (`x if isinstance(x, list) else x.tolist()`, `if isinstance(n, torch.Tensor): n =
      n.item()`);
    - a sync off the normal step: in an `except` handler, in the body of `if self.training:`
      (serving runs modules in eval mode), under a debug switch
      (`if envs.TRACE_X.get():`, `if self.debug:`, a module-level switch read from the environment
      and named for diagnostics: `_LOG_SCALES = os.environ.get(...)`; after `if not <switch>:
      return`), or in a
      branch that fills the cache its test reads (`if key not in cache: cache[key] = ...`, or the
      `else` of `if self._c is not None and self._c[0] == key:` that refills `self._c`), at any
      depth below the hot path (a helper called there is not entered); the same holds for a
      helper called under another backend's test or in a `with gpu_sync_allowed():` block. The
      cache must outlive the call (an attribute, a container filled by subscript, a `global`): a
      local default (`if lens is None: lens = x.sum(-1).tolist()`) is reported;
    - a sync on the side of a test that the step's host copy is missing (the `else` of `if
      meta.seq_lens_cpu is not None:`, or below `if self._has_cpu_metadata(batch): return ...`):
      an engine builds such copies with the step's metadata, so the device read is a fallback for
      callers that do not pass one (a read on the side where the copy is present is reported);
    - a sync under a test for another backend (`if is_npu(): cu_seqlens = cu_seqlens.to("cpu")`,
      `if not _is_cuda: return self._forward_impl(...)`, `if x.device.type == "mps":`, `if SYSTEM ==
      "ipex":`): what that backend's op requires, another backend's own sync
      (`torch.mps.synchronize()`), and the hot paths that are another backend's slot
      (`forward_xpu`, `forward_npu`);
    - a sync in the right operand of an `and` whose left one holds on one pass of the loop around
      it only (`if i == 0 and finish.any():`): it runs once per loop, not every step;
    - on a value the function shows lives on the host: a parameter annotated as a NumPy array
      (`cu_num_tokens: np.ndarray`), a name bound to a NumPy call, `.tolist()`, `.cpu()` or a
      tensor built without a device, an expression of such values only (`torch.where(torch.eq(
      token_ids_cpu, tok))`), or an op that keeps its input's device whose result is bound to a
      CPU-named name (`docs_cpu = torch.where(mask)[0]`);
    - a sync that runs once, not per step: a lazy first-call set-up (`if self.step_index is None:
      self._init_step_index(t)`, where the branch or the method it calls sets `self._step_index`;
      below `if hasattr(self, "_layout"): return self._layout` or `if self._key == key: return`
      when the rest of the function, or a method it calls, stores what the guard tests),
      and the set-up of a hot path that hands its step loop to a helper (`decode()` ending in
      `return self.decode_regular(...)`, whose body loops `for step in ...`): only what that
      helper reaches is reported; likewise a hot path with its own loop over steps (a `sample()`
      whose loop runs the model and updates the latents from it) runs once per request, and
      only its loop's body is the step;
    - in a multimodal encoder (a class named for a vision or audio tower, its attention or patch
      embeddings, or the projector, resampler or patch merger after it: `*Vision*`, `*ViT*`,
      `*Audio*`, `*Projector`, `*Resampler`, ...), in a language model's helpers named for
      multimodal inputs (`_process_image_input`, `_execute_mm_encoder`), and in a model zoo's
      `encoders/` folder (a generation pipeline's text and image encoders), in a pipeline's
      encoding stage or text encoder (`*EncodingStage`, `*EncodeStage`, `*TextEncoder`), and in a
      module whose file name has a word naming a vision encoder (`moonvit.py`, `intern_vit.py`,
      `siglip2.py`, `clip.py`, `vision_tower.py`): they run once per image, clip or prompt, not on
      every decode step; nor in a tokenizer's `decode`. A class named for the language model
      (`*ForConditionalGeneration`, `*ForCausalLM`, `*LLMModel`) is reported even there;
    - in a method of a class whose bases are not torch modules in a module that imports no torch,
      CuPy or JAX (TensorRT-LLM's legacy `tensorrt_llm.layers`): its `forward` defines a TensorRT
      network once, at engine build time, and handles NumPy weights, not device tensors;
    - in the step of a debugging tool's class (`*Dumper`, `*Debugger`, `*Profiler`);
    - a wait on a CUDA event (`self.prepare_inputs_event.synchronize()`): it waits only for the
      work recorded before the event, usually the previous step's, not for the whole queue;
    - in the `forward` of a pipeline stage (a class named `*Stage`), which runs once per request,
      a sync outside its loops (the denoising steps);
    - anything in test and benchmark files (by path), debugging tools (`debug*/`, `debug*.py`)
      and reference implementations (`reference.py`, `ref.py`, `*_reference.py`), or a
      leaderboard problem's shipped sample submission (`problems/.../submission.py`), which are
      not serving code;
    - through a function's call of itself (`self.forward(...)` inside `forward`): its own syncs are
      reported where they are written.

    ## Why is this bad?
    Every step pays a full GPU drain and a host round trip, the CPU can no longer run ahead to
    launch the next kernels, and the step cannot be captured in a CUDA graph. At decode batch
    sizes, where a step is a few hundred microseconds, one sync can cost more than the kernel
    it guards.

    ## Example
    ```python
    def forward(self, hidden_states, topk_ids):
        num_tokens = int(topk_ids.max().item()) + 1
        return self.experts(hidden_states, num_tokens)
    ```

    ## Use instead
    ```python
    def forward(self, hidden_states, topk_ids):
        # size buffers from static shapes, or compute the bound on the device
        return self.experts(hidden_states, self.max_num_tokens)
    ```

    ## Options
    - `hot-path-functions`: fnmatch patterns of the function names (or `Class.method` names) treated
      as per-step paths.
    """

    CODE = "KC203"
    NAME = "host-sync-in-hot-path"
    MESSAGE = "{what}{helper} in {region}: every step waits for the GPU"
    SEVERITY = "warning"
    PREVIEW = True  # below the bar on the test split: benchmarks/results/evaluation-test.md
    KNOWLEDGE = ("measuring/host-syncs", "sampling/avoid-host-syncs", "triton-cuda/cuda-graph-capture")
    OPTIONS = ("hot-path-functions",)
    VALID = [
        """
import torch
class RMSNorm(torch.nn.Module):
    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden))
        self.eps = float(torch.tensor(eps).item())
    def forward(self, x):
        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(var + self.eps)).to(x.dtype) * self.weight
""",
        """
import torch
class Layer(torch.nn.Module):
    def forward(self, x, lengths_list):
        lengths = torch.tensor(lengths_list)
        total = lengths.sum().item()
        return x[:total]
""",
    ]
    INVALID = [
        """
import torch
class MoE(torch.nn.Module):
    def forward(self, hidden_states, topk_ids):
        n = int(topk_ids.max().item()) + 1
        return self.experts(hidden_states, n)
""",
        """
import torch
def decode_step(model, tokens):
    logits = model(tokens)
    return logits.argmax(-1).tolist()
""",
    ]
    PREFILTER = (SYNC_TEXT,)
    NEEDS = ("hot-path reaches sync",)

    def leave_Module(self, original_node: cst.Module) -> None:
        model = self.model
        seen: set[int] = set()  # statements already reported (first_in_statement)
        if MEASUREMENT_PATH.search(model.path) or DEBUG_PATH.search(model.path) or REFERENCE_PATH.search(model.path) \
                or SHIPPED_EXAMPLE.search(model.path):
            return  # a test's "decode step", a debugging tool's step(), a reference, a problem's sample submission
        if ENCODER_PATH.search(model.path):
            return  # a pipeline's text and image encoders: once per request, before the denoising loop
        if OTHER_PLATFORM.search(model.path):
            return  # another platform's backend (an `_ascend/` or `npu/` folder): not the GPU's step
        for region, node, via in _hot_calls(model):
            where = via if via is not None else node
            if _allowed(model, node) or off_the_step(model, node, serving=True) or (
                via is not None and _allowed(model, via)
            ) or (_per_request(model, region) and not _in_loop(model, where, region.function)):
                continue
            if type(node) is cst.Subscript:
                what = model.subscript_sync(node)
            elif type(node) is not cst.Call:
                what = model.test_sync(node)
            else:
                what = model.sync_kind(node, model.enclosing_function(node))
                if what and (OTHER_BACKEND_CALL.match(model.call_name(node) or "") or _event_wait(model, node)):
                    continue  # ``torch.mps.synchronize()``: another backend's own sync; an event fence
            if what and first_in_statement(model, node, seen):
                self.report(node, what=what, helper=through(model, node, via), region=region.label,
                            line=native_wait_line(self, node) if type(node) is cst.Call else None)


def _off_cuda_slot(model, function) -> bool:
    if type(function) is not cst.FunctionDef:
        return False
    owner = model.context_of(function).split(".")
    return bool(OFF_CUDA_SLOT.search(function.name.value)) or (len(owner) >= 2 and bool(TOOL_CLASS.search(owner[-2])))


def _event_wait(model, call: cst.Call) -> bool:
    """``self.prepare_inputs_event.synchronize()``: waits only for the work recorded before that
    event (typically the previous step's), a deliberate fence rather than a drain of the queue."""
    func = call.func
    return type(func) is cst.Attribute and func.attr.value == "synchronize" and bool(
        re.search(r"event", model.dotted(func.value) or "", re.I))


def _hot_calls(model):
    """(region, node, via) for every call in a hot path, each once, and every subscript that may
    wait (a boolean mask, a slice bounded by a tensor's value) and every branch's test in the same code (the region's own, and the helpers it enters); a call reached only
    through the function calling itself is left out (it is reported where it is written)."""
    entered: dict[int, tuple] = {}  # id(helper) -> (region, helper, via): where its subscripts run
    for region, call, via in _region_calls(model):
        yield region, call, via
        if via is None and id(region) not in entered:
            entered[id(region)] = (region, None, None)
        elif via is not None:
            helper = model.enclosing_function(call)
            if helper is not None and id(helper) not in entered:
                entered[id(helper)] = (region, helper, via)
    seen: set[int] = set()
    for region, helper, via in entered.values():
        roots = [helper.body] if helper is not None else [n for n in region.nodes if id(n) not in region.exempt]
        for root in roots:
            for node in walk(root, into_scopes=False):
                if type(node) is cst.Subscript and id(node) not in seen and waiting_read(node):
                    seen.add(id(node))
                    yield region, node, via
                elif type(node) in TESTS and id(node.test) not in seen:
                    seen.add(id(node.test))
                    yield region, node.test, via


def _region_calls(model):
    """(region, call, via) for every call in a hot path (see :func:`_hot_calls`)."""
    seen: set[int] = set()
    hot = [r for r in model.timed_regions if r.kind == "hot-path"]
    hot_ids = {id(r.function) for r in hot}
    for region in [*hot, *_step_loop_regions(model, hot_ids)]:
        function = region.function
        if _off_cuda_slot(model, function) or _once_per_input(model, function) \
                or _graph_definition(model, function) or context(model, function) is not None:
            continue  # training, calibration, memoized or one-time code is no serving step (``function_context``)
        roots = [n for n in region.nodes if id(n) not in region.exempt]
        own = step_loops(model, function) if id(function) in hot_ids and type(function) is cst.FunctionDef else []
        if own:  # a hot path with its own loop over steps is a per-request driver: only the loops run every step
            roots = [loop.body for loop in own]
        loops = _step_loop_helpers(model, region.function)
        follow = lambda site: not (  # noqa: E731 - a helper called off the step, or only for images, is not entered
            off_the_step(model, site, serving=True) or _allowed(model, site) or MULTIMODAL_HELPER.search(_called_name(model, site))
            or (target := model.callee(site)) is not None and context(model, target) is not None)
        for call, via in model.calls_in(roots, follow=follow):
            if id(call) in seen or (via is not None and _recursive(model, via, region.function)):
                continue
            if loops and (via is None or id(model.callee(via)) not in loops):
                continue  # a driver's own set-up around the step loop it hands to a helper: once per request
            seen.add(id(call))
            yield region, call, via


def _step_loop_regions(model, hot: set[int]) -> list:
    """A function that is no hot path by name or by the index but loops over steps (a pipeline's
    ``__call__`` denoising ``for i, t in enumerate(timesteps)``, a generator's ``while
    token_index_to_generate <= last``; the index's ``step_loops``): each such loop's body runs every
    step. Not in measurement functions (a benchmark's loop over timed steps)."""
    out = []
    for defs in model.functions.values():
        for fn in defs:
            if id(fn) in hot or MEASUREMENT_FUNCTION.match(fn.name.value):
                continue
            name = model.scope_names.get(id(fn), fn.name.value)
            for loop in step_loops(model, fn):
                out.append(TimedRegion("hot-path", f"the step loop of {name}()", [loop.body], fn))
    return out


def _step_loop_helpers(model, function) -> set[int]:
    """A hot path that runs once per request and hands its step loop to a same-module helper
    (``decode()`` ending in ``return self.decode_regular(...)``, whose body is ``for step in
    range(self.max_new_tokens):``): the ids of those helpers. Only what they reach runs per step;
    the driver's own set-up and its other helpers run once per request. Empty when the hot path
    has its own step loop or calls no such helper."""
    if type(function) is not cst.FunctionDef or step_loops(model, function):
        return set()
    found: set[int] = set()
    for n in walk(function.body, into_scopes=False):
        if type(n) is cst.Call and not _in_loop(model, n, function):
            target = model.callee(n)
            if target is not None and target is not function and step_loops(model, target):
                found.add(id(target))
    return found


def _recursive(model, via: cst.Call, function) -> bool:
    """``self.forward(...)`` inside ``forward`` (a chunked or retried call of itself): what it
    reaches is this function's own code, or helpers whose arguments it cannot see."""
    if type(function) is not cst.FunctionDef:
        return False
    func = via.func
    name = func.attr.value if type(func) is cst.Attribute and type(func.value) is cst.Name and \
        func.value.value == "self" else func.value if type(func) is cst.Name else None
    return name == function.name.value


def _per_request(model, region) -> bool:
    """A pipeline stage's ``forward`` (a class named ``*Stage``) runs once per request; only its
    loops (the denoising steps) run per step."""
    owner = model.context_of(region.function).split(".")
    return len(owner) >= 2 and owner[-2].endswith("Stage")


def _in_loop(model, node: cst.CSTNode, function) -> bool:
    for anc in model.ancestors(node):
        if anc is function:
            return False
        if type(anc) in (cst.For, cst.While, cst.ListComp, cst.GeneratorExp, cst.DictComp, cst.SetComp):
            return True
    return False


# ``with gpu_sync_allowed():``, ``with allow_sync():``: the code declares the sync deliberate.
ALLOW_SYNC = re.compile(r"sync_allowed|allow_?(gpu_?)?syncs?$", re.I)


def _allowed(model, node: cst.CSTNode) -> bool:
    """Whether a sync is declared deliberate (inside a ``with ...sync_allowed()`` block), or taken
    only when the caller passed a tensor where a list would do (the other side of
    ``x if isinstance(x, list) else x.tolist()``)."""
    child = node
    for anc in model.ancestors(node):
        if type(anc) is cst.With and any(
            type(item.item) is cst.Call and ALLOW_SYNC.search((model.dotted(item.item.func) or "").split(".")[-1])
            for item in anc.items
        ):
            return True
        if type(anc) in (cst.If, cst.IfExp) and child is not anc.test and _isinstance_list(anc.test):
            return True
        if type(anc) is cst.If and child is anc.body and model.other_backend(anc.test):
            return True  # ``if is_npu(): x = x.to("cpu")``: what that backend's op requires
        if type(anc) is cst.BooleanOperation and type(anc.operator) is cst.And and child is anc.right \
                and _first_pass(model, anc.left):
            return True  # ``if i == 0 and finish.any():``: the sync runs on the loop's first pass only
        if type(anc) is cst.FunctionDef:
            return False
        child = anc
    return False


def _first_pass(model, test: cst.CSTNode) -> bool:
    """Whether ``test`` holds on one pass of a loop around it only: its counter compared equal to a
    number (``i == 0``, ``step == n - 1``) or negated (``not i``), the counter being a target of an
    enclosing ``for``."""
    if type(test) is cst.Comparison and len(test.comparisons) == 1 and type(test.comparisons[0].operator) is cst.Equal:
        name, other = test.left, test.comparisons[0].comparator
        if type(name) is not cst.Name:
            name, other = other, name
        if type(name) is not cst.Name or model.places.place(other) != "host":
            return False
    elif type(test) is cst.UnaryOperation and type(test.operator) is cst.Not and type(test.expression) is cst.Name:
        name = test.expression
    else:
        return False
    for anc in model.ancestors(test):
        if type(anc) is cst.For and any(type(n) is cst.Name and n.value == name.value for n in walk(anc.target)):
            return True
        if type(anc) in (cst.FunctionDef, cst.Lambda):
            return False
    return False


def _once_per_input(model, function) -> bool:
    """Whether a hot path runs once per image, clip or prompt rather than per step (see
    ``once_per_input``)."""
    if type(function) is not cst.FunctionDef:
        return False
    owner = model.context_of(function).split(".")
    return once_per_input(owner[-2] if len(owner) >= 2 else "", model.path)


# -- graph definition: a legacy TensorRT layer's forward builds the engine once ------------------

# Libraries whose values live on a device: a module that imports none of them handles no device
# tensors of its own.
DEVICE_LIBRARIES = {"torch", "cupy", "jax", "jaxlib"}


def _graph_definition(model, function) -> bool:
    """A method of a class whose bases are not torch modules, in a module that imports no torch,
    CuPy or JAX (TensorRT-LLM's ``tensorrt_llm.layers``: ``class FusedGatedMLP(Module)`` with
    ``Module`` its own network-definition base): its ``forward`` adds layers to a TensorRT network
    once, when the engine is built, and its ``.item()`` reads a NumPy weight (``raw_value``), not a
    device tensor. A class without bases is left alone (it may wrap a torch model by duck typing)."""
    if type(function) is not cst.FunctionDef:
        return False
    if any((name or "").split(".")[0] in DEVICE_LIBRARIES for name in model.imports.values()):
        return False
    owner = model.context_of(function).split(".")
    node = model.classes.get(owner[-2]) if len(owner) >= 2 else None
    if type(node) is not cst.ClassDef or not node.bases:
        return False
    return not any((model.qualname(b.value) or "").split(".")[0] in DEVICE_LIBRARIES for b in node.bases)


def _called_name(model, call: cst.Call) -> str:
    return (model.dotted(call.func) or "").split(".")[-1]


# A hot path that is another backend's slot (``forward_xpu``, ``forward_npu``) or a debugging
# tool's (``DsparkInfoDumper.observe_decode_step``).
OFF_CUDA_SLOT = re.compile(r"_(npu|xpu|hpu|mps|mlu|musa|cpu|tpu)$")
# Tools that run beside the step, and reference implementations a test compares the real one with
# (``NaiveBatchedExperts``, ``ReferenceAttention``): neither is the serving step.
TOOL_CLASS = re.compile(r"(Dumper|Debugger|Profiler)$|^(Naive|Reference|Ref)(?=[A-Z])")
OTHER_BACKEND_CALL = re.compile(r"^torch\.(npu|xpu|mps|hpu|mlu|musa)\.")


def _isinstance_list(test: cst.CSTNode) -> bool:
    for node in walk(test):
        if type(node) is cst.Call and type(node.func) is cst.Name and node.func.value == "isinstance" and any(
            type(n) is cst.Name and n.value in ("list", "tuple", "List", "Sequence", "Tensor")
            or type(n) is cst.Attribute and n.attr.value == "Tensor" for n in walk(node)
        ):
            return True
    return False


LOOPS = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _hot_sync(view: FileView, call: ast.Call) -> bool:
    """A host sync (``CLASSIFY["sync"]``) that is not on a CPU-named tensor (``_cpu_named``), not
    another backend's (``OTHER_BACKEND_CALL``) and not a wait on an event (``_event_wait``)."""
    if not CLASSIFY["sync"](view, call):
        return False
    func = call.func
    if type(func) is ast.Attribute and any(
            type(n) is ast.Name and HOST_NAME.search(n.id) or type(n) is ast.Attribute and HOST_NAME.search(n.attr)
            for n in ast.walk(func.value)):
        return False
    names = view.qualnames(func)
    if names and all(OTHER_BACKEND_CALL.match(n) for n in names):
        return False
    if type(func) is ast.Attribute and func.attr == "synchronize" and re.search(r"event", dotted(func.value) or "", re.I):
        return False
    return True


CLASSIFY["hot-sync"] = _hot_sync
