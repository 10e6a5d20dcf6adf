#!/usr/bin/env bash
# Full verification (every case, bf16 and fp16, CUDA-graph replay) and benchmark of kcheck's
# reference kernels on one GPU, in one command. Run from the repository root:
#
#   KCHECK_COMMIT=$(git rev-parse HEAD) benchmarks/kernels_h200.sh [RESULTS_JSON] [LOG]
#
# KCHECK_OPS (comma-separated) limits the run to those ops, for example the fused FP8 ops, whose
# results are kept in a file of their own:
#
#   KCHECK_OPS=rms_norm_fp8_quant,fused_add_rms_norm_fp8_quant,silu_and_mul_fp8_quant \
#     benchmarks/kernels_h200.sh kernels/results/h200_fused_fp8.json
#
# Wheels in .whl/ (for example liger-kernel, a benchmark peer) are installed first when present.
# Verification and benchmark run as two processes, so a failure in one still leaves the other's
# output; their JSON is merged into RESULTS_JSON at the end.
set -uo pipefail
results=${1:-kernels/results/h200.json}
log=${2:-${results%.json}.log}
site=$(mktemp -d)
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .whl/*.whl
fi
python3 -m pip install -q --no-deps --no-build-isolation --no-compile --target "$site" . || exit 2
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export KCHECK_COMMIT=${KCHECK_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
ops=()
for op in ${KCHECK_OPS:+${KCHECK_OPS//,/ }}; do ops+=(--op "$op"); done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$log"
python3 -m kcheck.kernels verify "${ops[@]}" --out "$results.verify" 2>&1 | tee -a "$log"
python3 -m kcheck.kernels bench "${ops[@]}" --out "$results.bench" 2>&1 | tee -a "$log"
python3 - "$results" <<'PY'
import json, os, sys
out = sys.argv[1]
parts = [json.load(open(p)) for p in (out + ".verify", out + ".bench") if os.path.exists(p)]
merged = {**parts[0], **{k: v for p in parts for k, v in p.items() if k in ("ceilings", "date") and p.get("rows")}}
merged["verify"] = [c for p in parts for c in p["verify"]]
merged["rows"] = [r for p in parts for r in p["rows"]]
merged["other_rows"] = [r for p in parts for r in p.get("other_rows", [])]
json.dump(merged, open(out, "w"), indent=1)
PY
rm -f "$results.verify" "$results.bench"
