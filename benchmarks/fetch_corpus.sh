#!/usr/bin/env bash
# Fetch the real trees kcheck is measured on, into DEST (default: a folder outside the repository).
#
#   bash benchmarks/fetch_corpus.sh DEST
#   MIRROR=DIR bash benchmarks/fetch_corpus.sh DEST   # git trees from local bare mirrors
#
# Versions scanned for benchmarks/results/ (commit or release, and where it came from):
#   vllm-0.33.0            PyPI sdist vllm-0.33.0.tar.gz   sha256 f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112
#   sglang (0.5.23)        PyPI wheel sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl, sglang/ only
#                          sha256 00b3cd5b265ac76c64185fbb6b95424f324ddd9f428d0306b77bc9db9d859937
#   flashinfer             github.com/flashinfer-ai/flashinfer        fb28d7242b3506a2348265962041acc1fb56cca4
#   Liger-Kernel           github.com/linkedin/Liger-Kernel           ead96b618e5c67bddc6a6e9bcb99bfe6b5ab661c (*.py, *.toml)
#   KernelBench            github.com/ScalingIntelligence/KernelBench  423217d9fda91e0c2d67e4a43bf62f96f6d104f1
#   reference-kernels      github.com/gpu-mode/reference-kernels       f83cb92a534cc67fa98d7e9813e7f8238abdb4e0
#   kernelbench-solutions  github.com/anneouyang/KernelBenchLeaderboard 170ca7965f53bba599d1078b6fcaa5dd2658ec50
#                          (LLM-generated KernelBench solutions, docs/assets/solutions/*.py)
#   tensorrt-llm           github.com/NVIDIA/TensorRT-LLM             1730a587d806be2397ee75722ea2b35dd8631c70 (*.py)
#                          (main, "Update TensorRT-LLM (#2363)", 22 Oct 2024, version 0.15.0.dev2024102200;
#                          565 .py files, tree da3bbb4f82420be72dd071217bec5b91dc0bbc7c). An older tree than the
#                          others, without the PyTorch backend (tensorrt_llm/_torch): the whole repository is
#                          about 2.5 GB, PyPI's tensorrt-llm sdists are stubs (10-210 kB) and its wheels are not on
#                          PyPI. The bare mirror read with MIRROR= is the fork AlessioNetti/TensorRT-LLM, whose main
#                          is this upstream commit plus two fork commits; the newest small-enough one found.
#
# vLLM's sdist cannot be fetched with `pip download` alone: pip builds its metadata, which needs
# setuptools-rust, setuptools-scm and torch, and with VLLM_TARGET_DEVICE=empty reports the version
# as 0.33.0+empty, which pip then rejects. The file itself is fetched straight from PyPI instead.
set -euo pipefail
DEST=${1:?usage: fetch_corpus.sh DEST}
mkdir -p "$DEST/dl"
cd "$DEST"

sdist_url() {  # the sdist's URL for a release, from PyPI's simple index (the JSON API is not always reachable)
  curl -sSf "https://pypi.org/simple/$1/" | grep -o "href=\"[^\"]*/$1-$2\.tar\.gz" | head -1 | cut -d'"' -f2
}

[ -f dl/vllm-0.33.0.tar.gz ] || curl -sSfL -o dl/vllm-0.33.0.tar.gz "$(sdist_url vllm 0.33.0)"
echo "f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112  dl/vllm-0.33.0.tar.gz" | sha256sum -c -
tar -xzf dl/vllm-0.33.0.tar.gz

pip download --no-deps --only-binary :all: --python-version 3.11 --platform manylinux_2_34_x86_64 \
  sglang==0.5.23 -d dl
mkdir -p sglang && (cd sglang && unzip -qo ../dl/sglang-0.5.23-*.whl 'sglang/*')

clone_at() {  # repo commit folder [pathspec...]: one commit's files, without history
  # With MIRROR set, the commit is read from a local bare mirror MIRROR/<owner>+<name>/repo instead
  # of github.com (for machines that cannot reach it).
  local repo=$1 commit=$2 folder=$3; shift 3
  mkdir -p "$folder"
  if [ -n "${MIRROR:-}" ]; then
    git -C "$MIRROR/${repo/\//+}/repo" archive "$commit" -- "$@" | tar -x -C "$folder"
    return
  fi
  git -C "$folder" init -q
  git -C "$folder" fetch -q --depth 1 "https://github.com/$repo" "$commit"
  git -C "$folder" archive FETCH_HEAD -- "$@" | tar -x -C "$folder"
  rm -rf "$folder/.git"
}
clone_at flashinfer-ai/flashinfer fb28d7242b3506a2348265962041acc1fb56cca4 flashinfer .
clone_at linkedin/Liger-Kernel ead96b618e5c67bddc6a6e9bcb99bfe6b5ab661c Liger-Kernel '*.py' '*.toml'
clone_at ScalingIntelligence/KernelBench 423217d9fda91e0c2d67e4a43bf62f96f6d104f1 KernelBench .
clone_at gpu-mode/reference-kernels f83cb92a534cc67fa98d7e9813e7f8238abdb4e0 reference-kernels .
clone_at anneouyang/KernelBenchLeaderboard 170ca7965f53bba599d1078b6fcaa5dd2658ec50 kernelbench-solutions '*.py'
if [ -n "${MIRROR:-}" ]; then  # no mirror of NVIDIA/TensorRT-LLM itself: a fork holding the same commit
  mkdir -p tensorrt-llm
  git -C "$MIRROR/AlessioNetti+TensorRT-LLM/repo" archive 1730a587d806be2397ee75722ea2b35dd8631c70 -- '*.py' \
    | tar -x -C tensorrt-llm
else
  clone_at NVIDIA/TensorRT-LLM 1730a587d806be2397ee75722ea2b35dd8631c70 tensorrt-llm '*.py'
fi

for d in vllm-0.33.0 sglang flashinfer Liger-Kernel KernelBench reference-kernels kernelbench-solutions \
    tensorrt-llm; do
  printf '%-24s %6d files\n' "$d" "$(find "$d" -name '*.py' | wc -l)"
done
