"""KC1xx: library dispatch presented as a kernel.

The rules of this family share one question, "what does this kernel claim hand its work to",
answered here from the module model's kernel claims (:mod:`kcheck.claims`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from kcheck.claims import Claim, Use, compute_uses, families
from kcheck.rule import Rule

CLAIM_NAMES = {"ModelNew", "custom_kernel", "forward_cuda", "custom_op", "register_kernel", "impl",
               "direct_register_custom_op", "register_custom_op"}

# Kernel libraries (not torch): a registered op that calls one integrates a real kernel.
EXTERNAL_KERNELS = re.compile(r"^(flashinfer|flash_attn)(\.|$)")
# A reference solution by its file name (ref.py, reference.py, matmul_ref.py).
REFERENCE_FILE = re.compile(r"^(ref|reference)(_|$)|_(ref|reference)$", re.I)
# A docstring that opens by calling the function a reference ("Reference kernel for AG-GEMM").
REFERENCE_DOC = re.compile(r"^\W*(a |the )?(naive |pytorch |torch )?reference\b", re.I)
# A leaderboard problem's shipped files (GPU MODE's ``problems/<set>/<name>/``): its sample
# ``submission*.py`` / ``template*.py``, which the problem's task.yml replaces with the contestant's
# file (often the reference itself), and the harness's own ``solutions/correct|wrong/`` cases.
SHIPPED_EXAMPLE = re.compile(
    r"(^|/)problems/([^/]+/)*(submission|template)\w*\.py$|(^|/)problems/([^/]+/)*solutions/(correct|wrong)/[^/]+\.py$")


class ClaimRule(Rule):
    """The family's base class: its rules judge kernel claims, so a file must name one of
    ``CLAIM_NAMES`` (or lie on a configured kernel path) before it is parsed for them."""

    PREFILTER = ("|".join(sorted(CLAIM_NAMES)),)

    @classmethod
    def prefilter(cls, text: str, config=None, seen: dict | None = None) -> bool:
        return bool(config is not None and config.kernel_paths) or super().prefilter(text, config, seen)


def claim_gate(summary, config) -> bool:
    """A file that can hold a kernel claim (any file when kernel-paths are configured)."""
    return bool(config.kernel_paths) or bool((summary.all_names | summary.class_names | summary.function_names()) & CLAIM_NAMES)


@dataclass
class Analysis:
    claim: Claim
    library: list[Use]  # library ops the baseline also uses (all of them when no baseline is known)
    launches: list[Use]
    unknown: list[Use]  # calls this file cannot see into: they may be the real kernel


def analyse(model) -> list[Analysis]:
    """Each kernel claim with what its compute path hands work to (cached on the model)."""
    cached = getattr(model, "_dispatch_analysis", None)
    if cached is not None:
        return cached
    out = []
    if REFERENCE_FILE.search(PurePosixPath(model.path).stem):
        model._dispatch_analysis = out
        return out  # ref.py, reference.py: the reference solution, not a claim
    if SHIPPED_EXAMPLE.search(model.path):
        model._dispatch_analysis = out
        return out  # a leaderboard problem's sample submission or harness case, not a contestant's claim
    for claim in model.kernel_claims:
        if claim.kind == "custom-op-class":
            continue  # a CustomOp's forward_cuda is the CUDA slot of a layer, not a kernel submission
        if REFERENCE_DOC.search(claim.function.get_docstring() or ""):
            continue  # "Reference kernel for ...": a problem's sample submission says what it is
        uses = compute_uses(model, claim.function, claim.attrs)
        library = [u for u in uses if u.kind == "library"]
        if claim.kind == "custom-op":
            # a registered op around FlashInfer or flash-attn exposes a real kernel to torch.compile
            library = [u for u in library if not EXTERNAL_KERNELS.match(u.name)]
        if claim.baseline is not None:
            base = families(compute_uses(model, claim.baseline, claim.baseline_attrs))
            library = [u for u in library if u.family == "baseline" or u.family in base]
        out.append(Analysis(claim, library, [u for u in uses if u.kind == "launch"],
                            [u for u in uses if u.kind == "unknown"]))
    model._dispatch_analysis = out
    return out
