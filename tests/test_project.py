"""The project index: per-step functions across modules, with why, and what reads it."""

from __future__ import annotations

import ast
import textwrap

from kcheck.config import DEFAULT_HOT_PATHS
from kcheck.engine import discover, scan
from kcheck.project import ENTRY, file_facts, harness_modules, module_name, per_step

MODEL = """
    import torch
    from ..ops.sampling import top_k_mask
    from ..ops import norms


    class Sampler(torch.nn.Module):
        def forward(self, logits, k):
            mask = top_k_mask(logits, k)
            self._log_stats(logits)
            return norms.scale(logits.masked_fill(mask, -1e9))

        def _log_stats(self, logits):
            return None

        def load_weights(self, weights):
            return calibrate(weights)
"""
SAMPLING = """
    import torch


    def top_k_mask(logits, k):
        kth = int(k.max().item())
        return logits < torch.topk(logits, kth).values[..., -1:]


    def calibrate(weights):
        return weights.abs().max().item()
"""
NORMS = """
    def scale(x):
        return x / x.norm()
"""
VISION = """
    from ..ops.sampling import top_k_mask


    class VisionTower:
        def forward(self, pixels, k):
            return top_k_mask(pixels, k)
"""


def _facts(files: dict[str, str]) -> dict:
    return {path: file_facts(ast.parse(textwrap.dedent(src)), path) for path, src in files.items()}


def test_module_names_and_relative_imports_resolve():
    assert module_name("pkg/sub/mod.py") == "pkg.sub.mod"
    assert module_name("pkg/__init__.py") == "pkg"
    facts = _facts({"pkg/layers/sampler.py": MODEL})["pkg/layers/sampler.py"]
    assert facts.imports["top_k_mask"] == "pkg.ops.sampling.top_k_mask"
    assert facts.imports["norms"] == "pkg.ops.norms"
    assert "Sampler.forward" in facts.calls and "top_k_mask" in facts.calls["Sampler.forward"]


def test_per_step_follows_calls_across_modules_and_says_why():
    files = _facts({"pkg/layers/sampler.py": MODEL, "pkg/ops/sampling.py": SAMPLING, "pkg/ops/norms.py": NORMS})
    steps = per_step(files, DEFAULT_HOT_PATHS)
    assert steps["pkg/layers/sampler.py"]["Sampler.forward"] == ENTRY
    assert steps["pkg/ops/sampling.py"]["top_k_mask"] == "called every step from pkg.layers.sampler.Sampler.forward()"
    assert "scale" in steps["pkg/ops/norms.py"]  # through a module alias: norms.scale()
    assert "calibrate" not in steps["pkg/ops/sampling.py"]  # reached only from load_weights: one-time work


def test_once_per_input_entries_and_tests_start_nothing():
    files = _facts({"pkg/models/vision.py": VISION, "pkg/ops/sampling.py": SAMPLING,
                    "tests/test_sampler.py": "from pkg.ops.sampling import top_k_mask\ndef forward(x):\n    top_k_mask(x, 1)\n"})
    steps = per_step(files, DEFAULT_HOT_PATHS)
    assert "pkg/ops/sampling.py" not in steps


def _write(root, files: dict[str, str]) -> None:
    for rel, src in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(src))


def _project_findings(root, files: dict[str, str], code: str) -> list[tuple[str, int]]:
    """(path, line) of ``code``'s findings on a project of ``files`` in package ``pkg/`` (scanned with
    its index, nothing cached)."""
    _write(root, {"pyproject.toml": "[tool.kcheck]\nroot = true\n", "pkg/__init__.py": "", **files})
    jobs, _ = discover([str(root)])
    return sorted((f.path, f.line) for f in scan(jobs, 1, cache=False).findings if f.code == code)


def test_a_sync_in_a_helper_of_another_module_is_reported_with_its_caller(tmp_path):
    _write(tmp_path, {"pyproject.toml": "[tool.kcheck]\nroot = true\n", "pkg/__init__.py": "", "pkg/layers/__init__.py": "",
                      "pkg/ops/__init__.py": "", "pkg/layers/sampler.py": MODEL, "pkg/ops/sampling.py": SAMPLING,
                      "pkg/ops/norms.py": NORMS})
    jobs, _ = discover([str(tmp_path)])
    found = [f for f in scan(jobs, 1, cache=False).findings if f.code == "KC203"]
    assert [(f.path, f.line) for f in found] == [("pkg/ops/sampling.py", 6)]
    assert "called every step from pkg.layers.sampler.Sampler.forward()" in found[0].message
    # the same file alone, with nothing cached: no caller in sight, no finding
    alone, _ = discover([str(tmp_path / "pkg" / "ops" / "sampling.py")])
    assert [f for f in scan(alone, 1, cache=False).findings if f.code == "KC203"] == []


def test_a_one_file_run_reads_the_rest_of_the_project_from_the_cache(tmp_path):
    _write(tmp_path, {"pyproject.toml": "[tool.kcheck]\nroot = true\n", "pkg/layers/sampler.py": MODEL,
                      "pkg/ops/sampling.py": SAMPLING, "pkg/ops/norms.py": NORMS})
    cache = tmp_path / "cache"
    jobs, _ = discover([str(tmp_path / "pkg")])
    scan(jobs, 1, cache_dir=cache)  # a full run fills the cache
    alone, _ = discover([str(tmp_path / "pkg" / "ops" / "sampling.py")])
    found = [f for f in scan(alone, 1, cache_dir=cache).findings if f.code == "KC203"]
    assert [(f.path, f.line) for f in found] == [("pkg/ops/sampling.py", 6)]
    # the caller changes so that it no longer calls the helper: the cached facts are refreshed
    (tmp_path / "pkg" / "layers" / "sampler.py").write_text("def forward(x):\n    return x\n")
    jobs, _ = discover([str(tmp_path / "pkg")])
    assert [f for f in scan(jobs, 1, cache_dir=cache).findings if f.code == "KC203"] == []



def test_a_warm_run_needs_no_facts_and_lost_facts_are_read_again(tmp_path):
    _write(tmp_path, {"pyproject.toml": "[tool.kcheck]\nroot = true\n", "pkg/layers/sampler.py": MODEL,
                      "pkg/ops/sampling.py": SAMPLING, "pkg/ops/norms.py": NORMS})
    cache = tmp_path / "cache"
    alone, _ = discover([str(tmp_path / "pkg" / "ops" / "sampling.py")])
    jobs, _ = discover([str(tmp_path / "pkg")])
    scan(jobs, 1, cache_dir=cache)
    (data,) = cache.rglob("facts-*.data.pickle")
    data.unlink()  # a warm run with the walk unchanged never reads the facts
    found = [f for f in scan(alone, 1, cache_dir=cache).findings if f.code == "KC203"]
    assert [(f.path, f.line) for f in found] == [("pkg/ops/sampling.py", 6)]
    assert not data.exists()
    # a changed file redoes the walk: the facts the data file lost are read from the files again
    (tmp_path / "pkg" / "ops" / "norms.py").write_text(NORMS + "\n\ndef extra(x):\n    return x\n")
    found = [f for f in scan(alone, 1, cache_dir=cache).findings if f.code == "KC203"]
    assert [(f.path, f.line) for f in found] == [("pkg/ops/sampling.py", 6)]
    assert data.exists()


LAZY = """
    _workspace = None


    def get_workspace(group):
        global _workspace
        if _workspace is not None:
            return _workspace
        _workspace = allocate(group)
        return _workspace


    def get_cached(cache, key):
        if key in cache:
            return cache[key]
        cache[key] = allocate(key)
        return cache[key]


    def get_checked(x):
        if x is not None:
            return refresh(x)
        return allocate(x)


    _PLANS = {}


    def get_plan(offsets, n):
        key = (n, offsets.data_ptr())
        hit = _PLANS.get(key)
        if hit is not None:
            return hit
        plan = build_plan(offsets, n)
        _PLANS[key] = plan
        return plan


    def get_other(offsets, n):
        hit = lookup(offsets)
        if hit is not None:
            return hit
        return build_plan(offsets, n)
"""


def test_a_lazy_initialiser_fills_its_cache_once():
    facts = _facts({"pkg/ws.py": LAZY})["pkg/ws.py"]
    # below ``if cached: return cached`` the body runs on the first call only
    assert facts.calls["get_workspace"] == []
    assert facts.calls["get_cached"] == []
    # a guard that returns something else, and fills nothing, is an ordinary branch
    assert sorted(facts.calls["get_checked"]) == ["allocate", "refresh"]
    # a local looked up in a module's dict stands for that cache; a lookup in no cache does not
    assert facts.calls["get_plan"] == ["_PLANS.get", "offsets.data_ptr"]
    assert sorted(facts.calls["get_other"]) == ["build_plan", "lookup"]


def test_another_backends_branch_is_not_the_gpu_step():
    src = """
        from .native import moe_forward_native
        from .triton import fused_experts


        class MoEMethod:
            def apply(self, x):
                if _is_cpu:
                    return moe_forward_native(x)
                return fused_experts(x)
    """
    facts = _facts({"pkg/moe.py": src})["pkg/moe.py"]
    assert facts.calls["MoEMethod.apply"] == ["fused_experts"]


def test_a_branch_holds_off_cuda_when_its_test_asks_names_or_denies_a_backend():
    from kcheck.project import other_backend

    def holds(test: str) -> bool:
        return other_backend(ast.parse(test, mode="eval").body)

    for test in ("_is_cpu", "is_npu()", "current_platform.is_xpu()", 'x.device.type == "mps"',
                 'SYSTEM == "ipex"', 'device.type in ("cpu", "mps")', "not current_platform.is_cuda_alike()",
                 'use_fused and SYSTEM == "ipex"', '_is_cpu or x.device.type == "npu"'):
        assert holds(test), test
    for test in ("not _is_cpu", 'SYSTEM == "cuda"', 'SYSTEM != "ipex"', '_is_cpu or use_fused', "is_cuda()",
                 'device.type in ("cpu", "cuda")', "use_fused"):
        assert not holds(test), test


def test_a_loop_steps_a_model_when_it_feeds_the_same_model_its_own_output():
    from kcheck.project import steps_a_model

    def steps(src: str) -> bool:
        loop = ast.parse(textwrap.dedent(src)).body[0]
        return steps_a_model(loop)

    assert steps("""
        for t_cur, t_prev in zip(ts[:-1], ts[1:]):
            pred = model(x, t_cur)
            x = x + (t_prev - t_cur) * pred
    """)
    assert steps("""
        for t in sched:
            latents = scheduler.step(self.transformer(latents, t), t, latents).prev_sample
    """)
    assert steps("""
        for _ in range(n):
            logits = self.model.forward(tokens)
            tokens = torch.cat([tokens, torch.argmax(logits[:, -1], -1)[:, None]], 1)
    """)
    assert not steps("""
        for layer in self.layers:
            hidden = layer.forward(hidden)
    """)  # a loop over layers
    assert not steps("""
        for layer_index in pb:
            module = looper.gptq_model.pre_quantize(module)
    """)  # a method of the model, not a run of it
    assert not steps("""
        for rank in range(world_size):
            config = copy.deepcopy(config)
            weights = load_weights_from_hf_model(hf_model, config=config)
    """)  # the carried value is not the model's output


def test_below_a_lazy_guard_the_model_sees_the_first_call_only(tmp_path):
    workspace = """
        import torch

        _ws = None


        def get_workspace(n: torch.Tensor):
            global _ws
            peek = int(n.sum())
            if _ws is not None:
                return _ws
            _ws = torch.empty(int(n.max()), device="cuda")
            return _ws
    """
    layer = """
        import torch
        from ..ops.workspace import get_workspace


        class Layer(torch.nn.Module):
            def forward(self, x: torch.Tensor, n: torch.Tensor):
                return x + get_workspace(n)[0]
    """
    _write(tmp_path, {"pyproject.toml": "[tool.kcheck]\nroot = true\n", "pkg/ops/workspace.py": workspace,
                      "pkg/layers/layer.py": layer})
    jobs, _ = discover([str(tmp_path / "pkg")])
    found = [f for f in scan(jobs, 1, cache=False).findings if f.code == "KC203"]
    # the sync above the guard runs every call; the one that fills the workspace runs once
    assert [(f.path, f.line) for f in found] == [("pkg/ops/workspace.py", 9)]


HARNESS = """
    import time
    import torch


    class Timer:
        def median_us(self, fn):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            return 1e3 * start.elapsed_time(end)


    def interleaved(fns, rounds, timer: Timer):
        return {name: [timer.median_us(fn) for _ in range(rounds)] for name, fn in fns.items()}


    def unrelated(x):
        return x + 1
"""
DRIVER = """
    import time
    import torch
    from mypkg.harness import interleaved, unrelated


    def main(fns, timer):
        began = time.time()
        for name, fn in fns.items():
            fn()
            torch.cuda.synchronize()
            print(name, interleaved({name: fn}, 3, timer))
        print(f"took {time.time() - began:.0f} s")


    def timed(fn):
        t0 = time.perf_counter()
        unrelated(fn())
        torch.cuda.synchronize()
        fn()
        torch.cuda.synchronize()
        return time.perf_counter() - t0
"""


def test_a_function_that_calls_a_timing_function_times_too():
    from kcheck.project import measuring, timing_calls

    files = _facts({"harness/harness.py": HARNESS, "benchmarks/driver.py": DRIVER})
    found = measuring(files)
    # through the parameter annotated ``Timer`` and the package installed under another name
    assert ("harness/harness.py", "Timer.median_us") in found
    assert ("harness/harness.py", "interleaved") in found
    assert ("harness/harness.py", "unrelated") not in found
    assert timing_calls(files)["benchmarks/driver.py"] == ("interleaved",)


def test_a_host_timer_around_a_timing_driver_times_a_job_not_the_gpu(tmp_path):
    _write(tmp_path, {"pyproject.toml": "[tool.kcheck]\nroot = true\n", "harness/harness.py": HARNESS,
                      "benchmarks/driver.py": DRIVER})
    jobs, _ = discover([str(tmp_path)])
    found = sorted((f.code, f.line) for f in scan(jobs, 1, cache=False).findings
                   if f.path == "benchmarks/driver.py" and f.code.startswith("KC2"))
    # main()'s window calls interleaved(), which times: a job. timed()'s window measures, and syncs inside it
    assert found == [("KC201", 19)]
    # without the harness in sight the driver's window is taken for a measurement
    alone, _ = discover([str(tmp_path / "benchmarks" / "driver.py")])
    lines = {f.line for f in scan(alone, 1, cache=False).findings if f.code == "KC201"}
    assert lines == {11, 19}


def test_numeric_constants_imported_from_another_module_are_known():
    from kcheck.project import imported_constants

    files = _facts({
        "pkg/ops/sizes.py": "BLOCK = 64\nPAGES = BLOCK * 4\nTWICE = 1\nTWICE = 2\nNAME = 'x'\nW = torch.ones(3)\n",
        "pkg/layers/builder.py": "from ..ops.sizes import BLOCK, PAGES, TWICE, NAME, W\nfrom pkg.ops.sizes import BLOCK as B\n",
    })
    assert files["pkg/ops/sizes.py"].constants == {"BLOCK", "PAGES"}  # bound once, to numbers
    assert imported_constants(files) == {"pkg/layers/builder.py": ("B", "BLOCK", "PAGES")}


OPS = """
    import torch


    def _validate(x):
        assert x.sum().item() >= 0


    def attend(x, out=None, check_inputs=False):
        if check_inputs:
            _validate(x)
        return x


    def sample(x, check_inputs=False):
        if not check_inputs:
            return x
        return x[: int(x.max().item())]


    def gather(x, *, check_inputs: bool = False):
        if check_inputs:
            _validate(x)
        return x
"""
LAYER = """
    import torch
    from pkg.ops import attend, gather, sample


    class Layer(torch.nn.Module):
        def forward(self, x, **kwargs):
            y = attend(x, None)
            y = gather(y, check_inputs=True)
            return sample(y, **kwargs)
"""


def test_an_option_no_caller_turns_on_is_not_the_step(tmp_path):
    from kcheck.project import options_off

    files = _facts({"pkg/ops.py": OPS, "pkg/layer.py": LAYER})
    # attend(x, None) leaves check_inputs off; gather is called with it on; sample(y, **kwargs) passes
    # along what Layer's callers give, and no call in the project names check_inputs=... truthy but gather's
    assert options_off(files) == {"pkg/ops.py": (("attend", "check_inputs"),)}
    _write(tmp_path, {"pyproject.toml": "[tool.kcheck]\nroot = true\n", "pkg/__init__.py": "", "pkg/ops.py": OPS,
                      "pkg/layer.py": LAYER})
    jobs, _ = discover([str(tmp_path)])
    found = sorted((f.path, f.line) for f in scan(jobs, 1, cache=False).findings if f.code == "KC203")
    # _validate's sync is reached from gather (turned on); sample's through **kwargs (named elsewhere)
    assert found == [("pkg/ops.py", 6), ("pkg/ops.py", 18)]


def test_a_call_in_a_branch_that_fills_a_cache_is_not_per_step():
    files = _facts({
        "pkg/layers/ar.py": """
            import torch
            from ..ops.cache import enable_cache, refresh


            class AR(torch.nn.Module):
                def forward(self, x):
                    if self._adapter is None:
                        self._adapter = enable_cache(self)
                    if not self._ready:
                        refresh(self)
                    return x
        """,
        "pkg/ops/cache.py": "def enable_cache(m):\n    return m\n\n\ndef refresh(m):\n    return m\n",
    })
    steps = per_step(files, DEFAULT_HOT_PATHS)["pkg/ops/cache.py"]
    assert "enable_cache" not in steps  # once: the branch assigns what its test reads
    assert "refresh" in steps  # the test reads a flag the branch does not set: maybe every step


COUNTS = """
    def tokens_in(expert_num_tokens):
        return int(expert_num_tokens.sum().item())


    def width_of(lens):
        return int(lens.max().item())


    class Planner:
        def plan(self, kv_lens, pages):
            return kv_lens.sum().item() + pages.sum().item()
"""
MOE = """
    import torch
    from pkg.counts import Planner, tokens_in, width_of


    class MoE(torch.nn.Module):
        def forward(self, x, meta):
            n = tokens_in(meta.expert_num_tokens_cpu)
            w = width_of(meta.seq_lens_cpu) + width_of(meta.seq_lens)
            p = self.planner.plan(kv_lens=meta.kv_lens_cpu, pages=meta.pages)
            return x[:n]
"""


def test_a_parameter_every_caller_passes_a_host_array_is_on_the_host(tmp_path):
    from kcheck.project import host_params

    files = _facts({"pkg/counts.py": COUNTS, "pkg/moe.py": MOE})
    # Planner.plan is reached only through self.planner (unresolved here); width_of has a device caller
    assert host_params(files) == {"pkg/counts.py": (("tokens_in", "expert_num_tokens"),)}
    found = _project_findings(tmp_path, {"pkg/counts.py": COUNTS, "pkg/moe.py": MOE}, "KC203")
    # tokens_in (line 3) reads a host array: no sync; width_of(meta.seq_lens) passes a device tensor
    assert found == [("pkg/counts.py", 7)]


PLAN = """
    def plan(qo_lens, kv_lens, qo_offset=None, steps=None):
        lens = qo_lens.tolist()
        width = kv_lens.max().item()
        offsets = qo_offset.tolist()
        return lens, width, offsets, steps.sum().item()
"""
BUILDER = """
    import torch
    from pkg.plan import plan


    class Builder(torch.nn.Module):
        def forward(self, meta, lo, hi, schedule):
            side_qo = meta.qo_lens_cpu[lo:hi]
            side_kv = meta.kv_lens_cpu[lo:hi]
            steps = torch.tensor(schedule)
            return plan(side_qo, side_kv, qo_offset=side_kv - side_qo + 1, steps=steps)


    class Other(torch.nn.Module):
        def forward(self, meta, lens):
            lens = lens.cuda()
            return plan(meta.qo_lens_cpu, lens, qo_offset=meta.offsets_cpu, steps=torch.tensor([1], device="cuda"))
"""


def test_a_value_the_caller_computes_from_host_arrays_is_on_the_host(tmp_path):
    from kcheck.project import host_params

    files = _facts({"pkg/plan.py": PLAN, "pkg/builder.py": BUILDER})
    # kv_lens: Other passes a local rebound from a parameter to the GPU; steps: a GPU tensor there
    assert host_params(files) == {"pkg/plan.py": (("plan", "qo_lens"), ("plan", "qo_offset"))}
    found = _project_findings(tmp_path, {"pkg/plan.py": PLAN, "pkg/builder.py": BUILDER}, "KC203")
    assert found == [("pkg/plan.py", 4), ("pkg/plan.py", 6)]  # the GPU reads: kv_lens (Other's), steps


ROTARY = """
    import torch


    def rotate(q, cos, seq_len=None):
        if seq_len is None:
            seq_len = int(cos.shape[0]) + q.new_tensor(0).max().item()
        return q * cos[:seq_len]


    def scale(x, lens=None):
        width = lens if lens is not None else x.sum(-1).max().item()
        return x * width


    def norm(x, eps=None):
        if eps is None:
            eps = x.abs().max().item()
        return x / eps


    def window(x, size=None):
        if size is None:
            size = x.sum().item()
        return x[:size]
"""
DECODE = """
    import torch
    from pkg.rotary import norm, rotate, scale, window


    class Attention(torch.nn.Module):
        def forward(self, q, cos, meta, **kwargs):
            q = rotate(q, cos, meta.max_len)
            q = rotate(q, cos, seq_len=meta.max_len)
            q = scale(q, lens=meta.width) + scale(q, meta.width)
            q = window(q, size=kwargs.get("size"))
            return norm(q) + norm(q, eps=None)
"""


def test_a_default_every_caller_overrides_is_not_the_step(tmp_path):
    from kcheck.project import given_params

    files = _facts({"pkg/rotary.py": ROTARY, "pkg/decode.py": DECODE})
    # rotate and scale get their parameter at every call, by position or keyword; norm is called
    # once with nothing and once with a literal None, window with a lookup that may find nothing
    assert given_params(files) == {"pkg/rotary.py": (("rotate", "seq_len"), ("scale", "lens"))}
    found = _project_findings(tmp_path, {"pkg/rotary.py": ROTARY, "pkg/decode.py": DECODE}, "KC203")
    # rotate's and scale's defaults are never taken; norm's and window's run when a caller passes none
    assert found == [("pkg/rotary.py", 18), ("pkg/rotary.py", 24)]


D512 = """
    import triton
    import triton.language as tl


    @triton.jit
    def _kernel(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


    def flash_d512(q, k, v):
        _kernel[(1,)](q, q.numel(), BLOCK=128)
        return q
"""
ROUTE = """
    import torch


    def route(q, k, v):
        try:
            from pkg.d512 import flash_d512

            return flash_d512(q, k, v)
        except Exception:
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)
"""


def test_a_function_from_a_module_that_defines_a_kernel_is_a_launch(tmp_path):
    # d512.py's name says nothing of kernels; the index knows it defines a Triton kernel, so a call
    # of what it exports is a launch, and a broad except around it a fallback (KC303)
    assert _project_findings(tmp_path, {"pkg/d512.py": D512, "pkg/route.py": ROUTE}, "KC303") == [("pkg/route.py", 10)]


def test_a_project_module_that_loads_no_kernel_is_no_kernel_import(tmp_path):
    # little_kernel/ is a code generator: its name matches a kernel module, but the index reads that
    # importing it loads no kernel, so a best-effort import or call under a broad except is no fallback
    ir = "def infer(node):\n    return node\n"
    user = """
        def element_type(node):
            try:
                from little_kernel.ir import infer

                return infer(node)
            except Exception:
                return None


        def element_type_via_module(node):
            try:
                import little_kernel.ir as ir

                return ir.infer(node)
            except Exception:
                return None
    """
    _write(tmp_path, {"pyproject.toml": "[tool.kcheck]\nroot = true\n", "little_kernel/__init__.py": "",
                      "little_kernel/ir.py": ir, "little_kernel/codegen.py": user})
    jobs, _ = discover([str(tmp_path)])
    assert [f for f in scan(jobs, 1, cache=False).findings if f.code.startswith("KC3")] == []
    # the same file alone, without the project's modules, reads the package's name
    jobs, _ = discover([str(tmp_path / "little_kernel" / "codegen.py")])
    assert {f.code for f in scan(jobs, 1, cache=False).findings if f.code.startswith("KC3")} == {"KC303"}


def test_a_triton_function_another_module_calls_is_a_device_helper(tmp_path):
    # _rows' BLOCK_M is a plain parameter, but its only use is as a helper inlined into gemm.py's
    # kernel, which passes its own constexpr: not a runtime block size (KC504)
    helpers = """
        import triton
        import triton.language as tl


        @triton.jit
        def _rows(tile, n_m, BLOCK_M):
            return tile * BLOCK_M + tl.arange(0, BLOCK_M)
    """
    gemm = """
        import triton
        import triton.language as tl
        from pkg.helpers import _rows


        @triton.jit
        def gemm(a_ptr, n_m, BLOCK: tl.constexpr):
            offs = _rows(tl.program_id(0), n_m, BLOCK)
            tl.store(a_ptr + offs, tl.load(a_ptr + offs, mask=offs < n_m), mask=offs < n_m)
    """
    assert _project_findings(tmp_path, {"pkg/helpers.py": helpers, "pkg/gemm.py": gemm}, "KC504") == []
    jobs, _ = discover([str(tmp_path / "pkg" / "helpers.py")])  # alone, nothing shows it is a helper
    assert [(f.path, f.line) for f in scan(jobs, 1, cache=False).findings if f.code == "KC504"] == [("pkg/helpers.py", 7)]


PIPELINE = """
    import torch
    from ..ops.guidance import guidance_scale, decode_preview


    class Pipeline:
        @torch.no_grad()
        def __call__(self, latents, timesteps):
            for i, t in enumerate(timesteps):
                latents = latents * guidance_scale(t)
            return decode_preview(latents)
"""
GUIDANCE = """
    def guidance_scale(t):
        return 1.0 + t.item() / 1000


    def decode_preview(latents):
        return latents.float().cpu()
"""


def test_what_a_loop_over_steps_calls_runs_every_step(tmp_path):
    files = _facts({"pkg/pipelines/video.py": PIPELINE, "pkg/ops/guidance.py": GUIDANCE})
    steps = per_step(files, DEFAULT_HOT_PATHS)
    assert steps["pkg/ops/guidance.py"] == {
        "guidance_scale": "called in the step loop of pkg.pipelines.video.Pipeline.__call__()"}
    # decode_preview runs after the loop, once per request
    _write(tmp_path, {"pyproject.toml": "[tool.kcheck]\nroot = true\n", "pkg/__init__.py": "",
                      "pkg/pipelines/video.py": PIPELINE, "pkg/ops/guidance.py": GUIDANCE})
    jobs, _ = discover([str(tmp_path)])
    found = [f for f in scan(jobs, 1, cache=False).findings if f.code == "KC203"]
    assert [(f.path, f.line) for f in found] == [("pkg/ops/guidance.py", 3)]
    assert "called in the step loop of pkg.pipelines.video.Pipeline.__call__()" in found[0].message


CONTEXTS = """
    import functools
    import torch
    from ..ops.stats import count, lengths


    class Adam8bit(torch.optim.Optimizer):
        def step(self):
            return count(self.state)


    class TokenLoss(torch.nn.Module):
        def forward(self, logits):
            return count(logits)


    class Layer(torch.nn.Module):
        def forward(self, x):
            return x[: plan(x.shape)[0]]


    @functools.lru_cache
    def plan(shape):
        return lengths(shape)
"""


def test_contexts_are_decided_once_per_function_with_a_reason():
    from kcheck.project import function_context

    files = _facts({"pkg/layers/ctx.py": CONTEXTS,
                    "pkg/ops/stats.py": "def count(x):\n    return x\n\n\ndef lengths(s):\n    return s\n"})
    contexts = files["pkg/layers/ctx.py"].contexts
    assert contexts["Adam8bit.step"] == "training-only: a method of an optimizer"
    assert contexts["TokenLoss.forward"] == "training-only: a method of a loss"
    assert contexts["plan"].startswith("memoized (@lru_cache)")
    assert "Layer.forward" not in contexts
    # an optimizer's step and a loss start no walk; a memoized builder is not entered
    assert "pkg/ops/stats.py" not in per_step(files, DEFAULT_HOT_PATHS)
    assert function_context("pkg/trainer/loop.py", "", (), "run", ()) == "training code (by its module's path)"
    assert function_context("pkg/model.py", "", (), "run", (), trains=True).startswith("training-only")
    assert function_context("pkg/model.py", "Attention", ("nn.Module",), "forward", ()) is None


def test_an_attention_processor_call_is_a_per_step_entry():
    src = """
        from ..ops.masks import block_mask


        class CausalAttnProcessor:
            def __call__(self, attn, hidden_states):
                return block_mask(hidden_states)


        class PromptProcessor:
            def __call__(self, text):
                return block_mask(text)
    """
    files = _facts({"pkg/layers/attn.py": src, "pkg/ops/masks.py": "def block_mask(x):\n    return x\n"})
    steps = per_step(files, DEFAULT_HOT_PATHS)
    assert "CausalAttnProcessor.__call__" in steps["pkg/layers/attn.py"]
    assert "PromptProcessor.__call__" not in steps["pkg/layers/attn.py"]
    assert steps["pkg/ops/masks.py"]["block_mask"] == "called every step from pkg.layers.attn.CausalAttnProcessor.__call__()"


def test_a_function_that_launches_a_kernel_runs_on_every_call_of_its_op():
    kernels = """
        import triton


        @triton.jit
        def rms_kernel(x_ptr, n):
            pass
    """
    ops = """
        import torch
        import triton
        from .kernels import rms_kernel
        from .util import max_len


        @triton.jit
        def _local_kernel(x_ptr):
            pass


        def rms_norm(x, cu_seqlens):
            n = max_len(cu_seqlens)
            rms_kernel[(n,)](x, n)


        def scaled(x):
            _local_kernel[(1,)](x)


        def fused(x):
            kernel = _local_kernel
            kernel[(1,)](x)


        def quantize(w):
            return torch.ops.my_ext.quantize(w)


        def dispatch(x, kind):
            return HANDLERS[kind](x)


        def process_weights_after_loading(w):
            rms_kernel[(1,)](w, 1)


        def onnx_quantize(x):
            rms_kernel[(1,)](x, 1)
    """
    util = "def max_len(cu_seqlens):\n    return int(cu_seqlens.diff().max())\n"
    bench = "from pkg.ops.rms import rms_norm\nfrom pkg.ops.kernels import rms_kernel\n\n\ndef run(x):\n    rms_kernel[(1,)](x, 1)\n"
    files = _facts({"pkg/ops/kernels.py": kernels, "pkg/ops/rms.py": ops, "pkg/ops/util.py": util,
                    "benchmarks/bench_rms.py": bench})
    steps = per_step(files, DEFAULT_HOT_PATHS)
    rms = steps["pkg/ops/rms.py"]
    assert rms["rms_norm"] == "it launches rms_kernel, so it runs on every call of its op"  # imported kernel
    assert rms["scaled"] == "it launches _local_kernel, so it runs on every call of its op"
    assert "fused" in rms and "quantize" in rms  # a kernel by its name; a custom op
    assert "dispatch" not in rms  # a table of handlers is no kernel
    assert "process_weights_after_loading" not in rms and "onnx_quantize" not in rms  # one-time work
    assert steps["pkg/ops/util.py"]["max_len"] == "called every step from pkg.ops.rms.rms_norm()"
    assert "benchmarks/bench_rms.py" not in steps


def test_an_op_whose_every_caller_is_a_script_or_training_is_not_a_step():
    ops = """
        import torch
        import triton


        @triton.jit
        def _fwd_kernel(x_ptr):
            pass


        @triton.jit
        def _bwd_kernel(x_ptr):
            pass


        def attn_fwd(x):
            _fwd_kernel[(1,)](x)


        def reorder(idx):
            _bwd_kernel[(1,)](idx)


        def attn_bwd(dy, idx):
            reorder(idx)
            _bwd_kernel[(1,)](dy)


        def shared(x):
            _fwd_kernel[(1,)](x)


        class Attn(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                attn_fwd(x)
                return shared(x)

            @staticmethod
            def backward(ctx, dy):
                shared(dy)
                return attn_bwd(dy, None)


        def run():
            _fwd_kernel[(1,)](torch.ones(4))
            print("done")


        def main():
            run()


        if __name__ == "__main__":
            main()
    """
    files = _facts({"pkg/ops/attn.py": ops})
    steps = per_step(files, DEFAULT_HOT_PATHS)["pkg/ops/attn.py"]
    assert "attn_fwd" in steps and "shared" in steps  # a forward calls them (shared: the backward too)
    assert "attn_bwd" not in steps and "reorder" not in steps  # only the backward calls them, or what it calls
    assert "run" not in steps and "main" not in steps  # a demo a script's __main__ block runs once


def test_a_sync_in_an_op_that_launches_a_kernel_is_reported_without_a_serving_caller(tmp_path):
    ops = """
        import torch
        import triton


        @triton.jit
        def _topk_kernel(x_ptr, n):
            pass


        def topk(x, cu_seqlens):
            n = cu_seqlens.diff().max().item()
            _topk_kernel[(n,)](x, n)


        def describe(x, cu_seqlens):
            return cu_seqlens.diff().max().item()
    """
    found = _project_findings(tmp_path, {"pkg/ops/topk.py": ops}, "KC203")
    assert found == [("pkg/ops/topk.py", 12)]  # the op, not the helper no op calls


GUARDS = """
    class Wrapper:
        def _store(self, a, b):
            self._a, self._b = a, b

        def layout(self, x):
            if hasattr(self, "_b"):
                return self._a, self._b
            self._store(count(x), count(x))
            return self._a, self._b

        def prepare(self, x):
            key = shape_key(x)
            if self._key == key:
                return
            rebuild(x)
            self._key = key

        def fill(self, x, lens=None):
            if lens is None:
                lens = measure(x)
            return lens
"""


def test_lazy_guards_and_local_defaults():
    calls = _facts({"pkg/w.py": GUARDS})["pkg/w.py"].calls
    assert calls["Wrapper.layout"] == ["hasattr"]  # below the guard: filled through self._store, once
    assert calls["Wrapper.prepare"] == ["shape_key"]  # rebuilt only when the key changes
    assert calls["Wrapper.fill"] == ["measure"]  # a local default is no cache: every call without lens


# -- calls through objects: attributes, locals and what methods return -----------------------------

ATTENTION = """
    from typing import Optional

    import torch
    from ..cache import BufferCache, CacheView, Planner


    class Attention(torch.nn.Module):
        def __init__(self, planner: Planner):
            super().__init__()
            self.cache = BufferCache()
            self.planner = planner
            self.loader = BufferCache()

        def forward(self, x, layer: int, view: Optional[CacheView] = None):
            self.cache.bump(x)
            local = self.cache.get_view(layer)
            local.update(x)
            built = self.cache.make_view(layer)
            built.update(x)
            self.planner.plan(x)
            return x

        def load_weights(self, w):
            self.loader.check(w)
"""
CACHE = """
    import torch


    class Base:
        def bump(self, x):
            return int(x.sum().item())


    class CacheView:
        def update(self, x):
            return x.nonzero()

        def check(self, w):
            return w.tolist()


    class BufferCache(Base):
        def get_view(self, layer) -> CacheView:
            return CacheView()

        def make_view(self, layer):
            return CacheView()

        def check(self, w):
            return w.max().item()


    class Planner:
        def plan(self, x):
            return x.cpu()
"""


def test_per_step_follows_methods_of_attributes_locals_and_returned_objects():
    files = _facts({"pkg/layers/attention.py": ATTENTION, "pkg/cache.py": CACHE})
    steps = per_step(files, DEFAULT_HOT_PATHS)["pkg/cache.py"]
    # self.cache = BufferCache(): its get_view, make_view and the method bump it inherits from Base
    assert {"BufferCache.get_view", "BufferCache.make_view", "Base.bump", "CacheView.update", "Planner.plan"} <= set(steps)
    # a local bound to what a method returns (annotated ``-> CacheView``, or ``return CacheView()``)
    assert steps["CacheView.update"] == "called every step from pkg.layers.attention.Attention.forward()"
    # the same kind of object used only by one-time work is not per step
    assert "BufferCache.check" not in steps and "CacheView.check" not in steps


def test_a_sync_in_a_method_of_a_held_object_is_reported(tmp_path):
    _write(tmp_path, {"pyproject.toml": "[tool.kcheck]\nroot = true\n", "pkg/__init__.py": "",
                      "pkg/layers/__init__.py": "", "pkg/layers/attention.py": ATTENTION, "pkg/cache.py": CACHE})
    jobs, _ = discover([str(tmp_path)])
    found = sorted((f.path, f.line) for f in scan(jobs, 1, cache=False).findings if f.code == "KC203")
    # Base.bump (7), CacheView.update (12), Planner.plan (31); not the checks run by load_weights (15, 26)
    assert found == [("pkg/cache.py", 7), ("pkg/cache.py", 12), ("pkg/cache.py", 31)]


SAME_MODULE = """
    import torch


    class Counter:
        def count(self, x):
            return int(x.sum().item())

        def describe(self, x):
            return x.tolist()


    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.counter = Counter()

        def forward(self, x):
            return x[: self.counter.count(x)]

        def __repr__(self):
            return str(self.counter.describe(torch.zeros(1)))
"""


def test_a_method_of_an_object_in_the_same_module_is_per_step(tmp_path):
    # the module model follows helper() and self.m(); a method of a held object only the index resolves
    steps = per_step(_facts({"pkg/layer.py": SAME_MODULE}), DEFAULT_HOT_PATHS)["pkg/layer.py"]
    assert steps["Counter.count"] == "called every step from pkg.layer.Layer.forward()"
    assert "Counter.describe" not in steps
    _write(tmp_path, {"pyproject.toml": "[tool.kcheck]\nroot = true\n", "pkg/__init__.py": "", "pkg/layer.py": SAME_MODULE})
    jobs, _ = discover([str(tmp_path)])
    assert [(f.path, f.line) for f in scan(jobs, 1, cache=False).findings if f.code == "KC203"] == [("pkg/layer.py", 7)]


def test_the_rules_read_the_index_answers_per_function():
    from kcheck.project import scope_answers

    source = textwrap.dedent("""
        import torch


        class Madgrad(torch.optim.Optimizer):
            def step(self):
                for p in self.params:
                    p.sum().item()


        def generate(model, x, max_tokens):
            for _ in range(3):
                x = x + 1
            for step in range(max_tokens):
                def helper():
                    for t in timesteps:
                        pass
                x = model(x)
            return x
    """)
    answers = scope_answers("pkg/gen.py", file_facts(ast.parse(source), "pkg/gen.py"))
    assert dict(answers["contexts"]) == {"Madgrad.step": "training-only: a method of an optimizer"}
    # the second loop statement of generate, and the only one of the function nested in it
    assert dict(answers["step_loops"]) == {"generate": (1,), "generate.helper": (0,)}
    assert scope_answers("tests/test_gen.py", file_facts(ast.parse(source), "tests/test_gen.py"))["contexts"] == (
        ("*", "test code (by its module's path)"),)


TASK = """
    import torch


    class Model(torch.nn.Module):
        def forward(self, a, b):
            return torch.matmul(a, b)


    def get_inputs():
        return [torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda")]
"""


def test_a_run_that_recorded_the_task_file_as_its_answer_claims_no_kernel(tmp_path):
    # one run's answer is the task's file again (reformatted, with a comment): the baseline, no claim;
    # another run's answer is its own Model: a solution, and its matmul is library dispatch
    answer = TASK.replace("torch.matmul(a, b)", "torch.matmul(a, b).contiguous()")
    copy = TASK.replace("    class Model", "    # the run's answer\n    class Model").replace("(a, b)", "(a,  b)")
    _write(tmp_path, {"pyproject.toml": "[tool.kcheck]\nroot = true\n", "level1/3_matmul.py": TASK,
                      "runs/r1/kernel_3/generated_code.py": copy, "runs/r2/kernel_3/generated_code.py": answer})
    jobs, _ = discover([str(tmp_path)])
    found = [(f.path, f.code) for f in scan(jobs, 1, cache=False).findings if f.code.startswith("KC1")]
    assert found == [("runs/r2/kernel_3/generated_code.py", "KC101")]
    # the copy checked with the project's index cached still sees the task it repeats
    cache = tmp_path / "cache"
    scan(jobs, 1, cache_dir=cache)
    alone, _ = discover([str(tmp_path / "runs" / "r1" / "kernel_3" / "generated_code.py")])
    assert [f for f in scan(alone, 1, cache_dir=cache).findings if f.code.startswith("KC1")] == []


LOADER = """
    def load_kernel(name):
        from kernels import get_kernel
        return get_kernel(name)
"""
LOADS_ON_IMPORT = """
    from pkg.hub import load_kernel

    moe = load_kernel("moe")


    def moe_apply(x, w):
        return moe.apply(x, w)
"""
GUARDED_IMPORT = """
    import torch

    try:
        from .experts import moe_apply
        HAVE_KERNEL = True
    except Exception:
        HAVE_KERNEL = False


    class MoE(torch.nn.Module):
        def forward(self, x, w):
            if HAVE_KERNEL:
                return moe_apply(x, w)
            return torch.einsum("td,edh->teh", x, w).sum(1)
"""


def test_a_broad_except_around_a_module_whose_import_loads_a_kernel_is_a_kernel_import(tmp_path):
    # nothing in ``.experts`` or ``moe_apply`` names a kernel: the index knows that importing
    # pkg/moe/experts.py runs a project function that fetches one (pkg.hub.load_kernel -> get_kernel)
    files = {"pyproject.toml": "[tool.kcheck]\nroot = true\n", "pkg/__init__.py": "", "pkg/moe/__init__.py": "",
             "pkg/hub.py": LOADER, "pkg/moe/experts.py": LOADS_ON_IMPORT, "pkg/moe/layer.py": GUARDED_IMPORT}
    _write(tmp_path, files)
    jobs, _ = discover([str(tmp_path)])
    found = [f for f in scan(jobs, 1, cache=False).findings if f.code == "KC303"]
    assert [(f.path, f.line) for f in found] == [("pkg/moe/layer.py", 7)]  # the handler
    assert "`.experts.moe_apply` (its module loads a kernel when imported)" in found[0].message
    # the module imported fetches nothing at import time (the load waits for a call): no kernel import
    _write(tmp_path, {"pkg/moe/experts.py": LOADS_ON_IMPORT.replace('moe = load_kernel("moe")', "moe = None")})
    jobs, _ = discover([str(tmp_path)])
    assert [f for f in scan(jobs, 1, cache=False).findings if f.code == "KC303"] == []


def test_files_read_as_python_under_another_name_are_in_the_index(tmp_path):
    # an agent's answer kept as ``*.py.txt`` and read through ``extend-include``: its lazy builder's
    # guard is known to the index, so the build it keeps runs once and is not reported as timed
    solution = """
        import torch
        import torch.nn as nn
        from torch.utils.cpp_extension import load_inline

        _ext = None


        def _get_ext():
            global _ext
            if _ext is not None:
                return _ext
            _ext = load_inline("scale", cpp_sources="", cuda_sources="", functions=["scale"])
            return _ext


        def _rebuild():
            return load_inline("scale2", cpp_sources="", cuda_sources="", functions=["scale"])


        class ModelNew(nn.Module):
            def forward(self, x):
                return _rebuild().scale(_get_ext().scale(x))
    """
    _write(tmp_path, {"pyproject.toml": '[tool.kcheck]\nroot = true\npreview = true\nextend-include = ["*.py.txt"]\n',
                      "runs/sol.py.txt": solution})
    jobs, _ = discover([str(tmp_path)])
    found = [(f.path, f.line) for f in scan(jobs, 1, cache=False).findings if f.code == "KC205"]
    assert found == [("runs/sol.py.txt", 18)]  # _rebuild's build, on every call; _get_ext's is kept
    assert module_name("runs/sol.py.txt") == "runs.sol"


FLAG_MODULE = """
    try:
        from deep_ep import Buffer
        HAVE_DEEPEP = True
    except Exception:
        Buffer = None
        HAVE_DEEPEP = False
"""

REFUSING_IMPORTER = """
    from pkg.comm import HAVE_DEEPEP, Buffer


    class DeepEPDispatcher:
        def __init__(self, group):
            if not HAVE_DEEPEP:
                raise ImportError("DeepEP is required for expert parallelism: pip install deep_ep")
            self.buffer = Buffer(group)
"""

ANNOUNCING_IMPORTER = """
    import logging

    from pkg import HAVE_DEEPEP

    logger = logging.getLogger(__name__)


    def pick_backend():
        if HAVE_DEEPEP:
            return "deepep"
        logger.warning("DeepEP is not installed: expert parallelism falls back to all-to-all")
        return "all_to_all"
"""

SILENT_IMPORTER = """
    from pkg.comm import HAVE_DEEPEP


    def dispatch(x, group):
        if HAVE_DEEPEP:
            return deepep_dispatch(x, group)
        return all_to_all_dispatch(x, group)
"""


def test_a_flag_every_importer_refuses_or_announces_is_no_silent_fallback(tmp_path):
    # the broad ``except`` that sets HAVE_DEEPEP loses the error's text, but every module that reads
    # the flag raises or warns when it says "missing" (one through the package that re-exports it):
    # the failed import is never a silent slower path, so KC303 stays quiet
    files = {"pyproject.toml": "[tool.kcheck]\nroot = true\n", "pkg/__init__.py": "from .comm import HAVE_DEEPEP\n",
             "pkg/comm.py": FLAG_MODULE, "pkg/dispatcher.py": REFUSING_IMPORTER, "pkg/backend.py": ANNOUNCING_IMPORTER}
    _write(tmp_path, files)
    jobs, _ = discover([str(tmp_path)])
    assert [f for f in scan(jobs, 1, cache=False).findings if f.code == "KC303"] == []
    # one importer that chooses on the flag without a word: the handler is reported again
    _write(tmp_path, {"pkg/silent.py": SILENT_IMPORTER})
    jobs, _ = discover([str(tmp_path)])
    found = [(f.path, f.line) for f in scan(jobs, 1, cache=False).findings if f.code == "KC303"]
    assert found == [("pkg/comm.py", 5)]  # the handler


def test_reads_that_answer_missing_out_loud():
    tree = ast.parse(textwrap.dedent("""
        from pkg.comm import HAVE_A, HAVE_B, has_c, HAVE_D, op_e
        assert HAVE_A, "needs A"
        if not HAVE_B:
            raise ImportError("needs B")
        if has_c() and x > 0:
            fast()
        else:
            print("C missing: slow path")
        if HAVE_D:
            fast()
        else:
            slow()
        if op_e is None:
            logger.warning("E missing")
        use(op_e)
    """))
    reads = file_facts(tree, "pkg/user.py").reads
    assert reads == {"pkg.comm.HAVE_A": "said", "pkg.comm.HAVE_B": "said", "pkg.comm.has_c": "said",
                     "pkg.comm.HAVE_D": "silent", "pkg.comm.op_e": "silent"}
    # a name only called or dereferenced (after the flag check) fails loudly when the import failed
    used = file_facts(ast.parse("from pkg.comm import Buffer, ops\nb = Buffer(g)\nops.moe(x)\n"), "pkg/user.py").reads
    assert used == {"pkg.comm.Buffer": "used", "pkg.comm.ops": "used"}


def test_harness_modules_are_the_helpers_of_a_script_folder():
    """A benchmark problem's ``sota.py`` that only the ``benchmark.py`` beside it imports is the
    benchmark's helper; the same name in a package, or also imported by serving code, is not."""
    files = _facts({
        "problems/01_gemm/benchmark.py": "import sota as sota_mod\nimport reference\n",
        "problems/01_gemm/sota.py": "def is_available():\n    return True\n",
        "problems/01_gemm/reference.py": "import torch\n",
        "problems/01_gemm/solution.py": "import reference\n",
        "pkg/__init__.py": "",
        "pkg/bench_ops.py": "from pkg import sota\n",
        "pkg/sota.py": "def run():\n    pass\n",
    })
    assert harness_modules(files) == {"problems/01_gemm/sota.py": "problems/01_gemm/benchmark.py"}


def test_a_benchmark_helper_that_swaps_in_another_implementation_is_reported(tmp_path):
    """KC303 in a benchmark problem's ``sota.py`` (a harness module): a probe whose failure leaves the
    reference line out is the benchmark's business; one whose failure makes the caller time another
    implementation under the same name is a silent fallback."""
    sota = '''\
        import torch


        def _import_flashinfer():
            try:
                import flashinfer
                return flashinfer
            except Exception:
                return None


        def _liger_softmax(x):
            try:
                from liger_kernel.ops.softmax import LigerSoftmaxFunction
                return LigerSoftmaxFunction.apply(x)
            except Exception:
                return None


        def attention_sota(q, k, v):
            fi = _import_flashinfer()
            if fi is None:
                raise RuntimeError("flashinfer unavailable")
            return fi.single_decode_with_kv_cache(q, k, v)


        def softmax_sota(x):
            out = _liger_softmax(x)
            if out is not None:
                return out
            return torch.compile(torch.softmax)(x, -1)
        '''
    found = _project_findings(tmp_path, {"problems/01_softmax/sota.py": sota,
                                         "problems/01_softmax/benchmark.py": "import sota\nprint(sota)\n"}, "KC303")
    assert found == [("problems/01_softmax/sota.py", 16)]
