#!/usr/bin/env bash
# Where the time goes, on the GPU machine: per-config timings of every kernel, then Nsight Compute
# on the shapes where a kernel trails its best peer. Run from the repository root:
#
#   benchmarks/kernels_profile.sh OUT_DIR [OP:TOKENS:PEER,PEER ...] [copy] [--short RESULTS_JSON]
#
# With targets, only those ncu windows run (no sweep); without, the sweep and a default set.
# "copy[:MIB]" profiles copy kernels of MIB MiB each way (default 1024: the harness's 2 GiB ceiling); "--short RESULTS_JSON" adds
# every shape where kcheck trails its best peer in that results file, with that peer.
set -uo pipefail
out=${1:?usage: kernels_profile.sh OUT_DIR}
site=$(mktemp -d)
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .whl/*.whl
fi
python3 -m pip install -q --no-deps --no-build-isolation --no-compile --target "$site" . || exit 2
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
shift
targets=()
while [ $# -gt 0 ]; do
  if [ "$1" = --short ]; then
    mapfile -t -O ${#targets[@]} targets < <(python3 benchmarks/kernels_profile.py short "$2"); shift 2
  else
    targets+=("$1"); shift
  fi
done
if [ ${#targets[@]} -eq 0 ]; then
  timeout 300 python3 benchmarks/kernels_profile.py sweep 2>&1 | tee "$out/sweep.txt"
  targets=(rms_norm:16384:liger silu_and_mul:16384:liger rotary_embedding:256:liger fused_add_rms_norm:1:liger)
fi
# ncu with the clocks left as found; one window per (op, tokens), the kcheck kernel first, then its peers.
for target in "${targets[@]}"; do
  if [ "${target%%:*}" = copy ]; then
    mib=${target#copy}; mib=${mib#:}; mib=${mib:-1024}
    echo "=== ncu copy $mib MiB each way (torch.mul, Triton 2048 on 8 warps, Triton 8192 on 16)" >>"$out/ncu.txt"
    timeout 120 ncu --clock-control none --profile-from-start off \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
      --section WarpStateStats --section SchedulerStats \
      python3 benchmarks/kernels_profile.py copy --mib "$mib" >>"$out/ncu.txt" 2>&1
    continue
  fi
  IFS=: read -r op tokens peer <<<"$target"
  echo "=== ncu $op T=$tokens (kcheck, then $peer)" >>"$out/ncu.txt"
  timeout 120 ncu --clock-control none --profile-from-start off \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats \
    python3 benchmarks/kernels_profile.py window --op "$op" --tokens "$tokens" --peers "$peer" >>"$out/ncu.txt" 2>&1
done
grep -E "^(===|  [a-z_]+.*Context|    (Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Theoretical Occupancy|Block Size|Grid Size|Waves Per SM|One or More Eligible|Issued Warp))" "$out/ncu.txt" | head -150
