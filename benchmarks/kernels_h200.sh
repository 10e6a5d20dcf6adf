#!/usr/bin/env bash
# Full verification (every case, bf16 and fp16, CUDA-graph replay) and benchmark of kcheck's
# reference kernels on one GPU, in one command. Run from the repository root:
#
#   KCHECK_COMMIT=$(git rev-parse HEAD) benchmarks/kernels_h200.sh [RESULTS_JSON] [LOG]
#
# Wheels in .whl/ (for example liger-kernel, a benchmark peer) are installed first when present.
set -euo pipefail
results=${1:-kernels/results/h200.json}
log=${2:-${results%.json}.log}
site=$(mktemp -d)
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .whl/*.whl
fi
python3 -m pip install -q --no-deps --no-build-isolation --no-compile --target "$site" .
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export KCHECK_COMMIT=${KCHECK_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$log"
python3 -m kcheck.kernels all --out "$results" 2>&1 | tee -a "$log"
