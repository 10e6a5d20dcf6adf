// RMSNorm and fused add+RMSNorm written directly in CUDA C++, for one question of issue 6: does a
// design that Triton 3.6 cannot express move these ops' bytes faster on an H200 than the Triton
// kernels in kernels/? Built and timed by benchmarks/kernels_variants.py --round 12; an
// experiment, not a shipped kernel (bf16, hidden size 4096 only, no fallbacks).
//
// Designs, each one launch over T rows:
//   norm_rows<THREADS, CL, FUSED>   one row per CTA (CL = 1), or one row split over a cluster of CL
//                                   CTAs whose partial sums of squares meet in distributed shared
//                                   memory, so that each CTA is CL times smaller and the grid's
//                                   ends drain sooner;
//   norm_warp_rows<WARPS, FUSED>    one row per warp, the sum reduced by shuffles alone;
//   copy_rows<THREADS, PAIR>        the same loads and stores without the arithmetic: the mover
//                                   of the norm's pattern (PAIR: two arrays into two, as fused).
// Every access is a 16-byte vector of 8 bf16; sums and products in fp32; the residual sum is
// rounded to bf16 before its square is taken, as the Triton kernel and the torch reference do.

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

namespace cg = cooperative_groups;

namespace {

constexpr int kHidden = 4096;
constexpr int kPack = 8;                    // bf16 values in one 16-byte access
constexpr int kPacks = kHidden / kPack;     // 16-byte accesses in one row

// Eight bf16 in one 16-byte word, loaded and stored as one 128-bit access.
using Pack = uint4;

struct Args {
  const Pack* x;
  const Pack* res;  // residual (fused only)
  const Pack* w;
  Pack* out;
  Pack* rout;       // x + residual (fused only)
  int rows;
  float eps;
};

__device__ __forceinline__ float2 unpack(uint32_t word) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&word));
}

__device__ __forceinline__ uint32_t pack(float a, float b) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// f applied to the four pairs of words of a and b, one word of the result each.
template <typename F>
__device__ __forceinline__ Pack zip(const Pack& a, const Pack& b, F f) {
  return make_uint4(f(a.x, b.x), f(a.y, b.y), f(a.z, b.z), f(a.w, b.w));
}

__device__ __forceinline__ float sum_squares(const Pack& p) {
  float s = 0.f;
  for (const uint32_t word : {p.x, p.y, p.z, p.w}) {
    const float2 f = unpack(word);
    s = fmaf(f.x, f.x, fmaf(f.y, f.y, s));
  }
  return s;
}

__device__ __forceinline__ Pack add_rounded(const Pack& a, const Pack& b) {
  return zip(a, b, [](uint32_t u, uint32_t v) {
    const float2 fu = unpack(u), fv = unpack(v);
    return pack(fu.x + fv.x, fu.y + fv.y);
  });
}

__device__ __forceinline__ Pack normalised(const Pack& v, const Pack& w, float rstd) {
  return zip(v, w, [rstd](uint32_t u, uint32_t g) {
    const float2 fu = unpack(u), fg = unpack(g);
    return pack(fu.x * rstd * fg.x, fu.y * rstd * fg.y);
  });
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int lane_mask = 16; lane_mask > 0; lane_mask >>= 1) v += __shfl_xor_sync(0xffffffffu, v, lane_mask);
  return v;
}

template <int THREADS>
__device__ __forceinline__ float block_sum(float v) {
  v = warp_sum(v);
  if constexpr (THREADS > 32) {
    __shared__ float partial[THREADS / 32];
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
    __syncthreads();
    v = 0.f;
#pragma unroll
    for (int i = 0; i < THREADS / 32; ++i) v += partial[i];
  }
  return v;
}

// Load this thread's PER packs (x, or x + residual rounded and stored), the weight's, and the
// thread's sum of squares.
template <int PER, int STRIDE, bool FUSED>
__device__ __forceinline__ float load_row(const Args& a, int64_t base, int wbase, Pack (&v)[PER], Pack (&w)[PER]) {
#pragma unroll
  for (int j = 0; j < PER; ++j) v[j] = a.x[base + j * STRIDE];
  if constexpr (FUSED) {
    Pack r[PER];
#pragma unroll
    for (int j = 0; j < PER; ++j) r[j] = a.res[base + j * STRIDE];
#pragma unroll
    for (int j = 0; j < PER; ++j) v[j] = add_rounded(v[j], r[j]);
  }
#pragma unroll
  for (int j = 0; j < PER; ++j) w[j] = a.w[wbase + j * STRIDE];
  if constexpr (FUSED) {
#pragma unroll
    for (int j = 0; j < PER; ++j) a.rout[base + j * STRIDE] = v[j];
  }
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < PER; ++j) s += sum_squares(v[j]);
  return s;
}

template <int PER, int STRIDE>
__device__ __forceinline__ void store_row(const Args& a, int64_t base, const Pack (&v)[PER], const Pack (&w)[PER], float sum) {
  const float rstd = rsqrtf(sum / kHidden + a.eps);
#pragma unroll
  for (int j = 0; j < PER; ++j) a.out[base + j * STRIDE] = normalised(v[j], w[j], rstd);
}

template <int THREADS, int CL, bool FUSED>
__global__ void __launch_bounds__(THREADS) norm_rows(Args a) {
  constexpr int kSlice = kPacks / CL;       // packs of the row this CTA owns
  constexpr int kPer = kSlice / THREADS;    // packs per thread
  static_assert(kSlice % THREADS == 0, "the slice must divide evenly over the threads");
  const int64_t row = blockIdx.x / CL;
  const int rank = static_cast<int>(blockIdx.x % CL);  // equals the cluster rank: clusters are CL consecutive CTAs
  const int wbase = rank * kSlice + threadIdx.x;
  const int64_t base = row * kPacks + wbase;
  // A CTA may write into another's shared memory only once that CTA has started: every CTA
  // arrives at a cluster barrier here and waits on it after its loads (without the wait, rows
  // failed at T=16384 on an H200 with "unspecified launch failure"; at T=64 they passed).
  if constexpr (CL > 1) asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
  Pack v[kPer], w[kPer];
  float s = block_sum<THREADS>(load_row<kPer, THREADS, FUSED>(a, base, wbase, v, w));
  if constexpr (CL > 1) {
    __shared__ float partial[CL];
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
    cg::cluster_group cluster = cg::this_cluster();
    if (threadIdx.x == 0) {
#pragma unroll
      for (int r = 0; r < CL; ++r) *cluster.map_shared_rank(&partial[rank], r) = s;
    }
    cluster.sync();  // every CTA's partial has landed in every CTA; no remote access follows
    s = 0.f;
#pragma unroll
    for (int r = 0; r < CL; ++r) s += partial[r];
  }
  store_row<kPer, THREADS>(a, base, v, w, s);
}

template <int WARPS, bool FUSED>
__global__ void __launch_bounds__(WARPS * 32) norm_warp_rows(Args a) {
  constexpr int kPer = kPacks / 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * WARPS + (threadIdx.x >> 5);
  if (row >= a.rows) return;
  const int lane = threadIdx.x & 31;
  const int64_t base = row * kPacks + lane;
  Pack v[kPer], w[kPer];
  const float s = warp_sum(load_row<kPer, 32, FUSED>(a, base, lane, v, w));
  store_row<kPer, 32>(a, base, v, w, s);
}

template <int THREADS, bool PAIR>
__global__ void __launch_bounds__(THREADS) copy_rows(Args a) {
  constexpr int kPer = kPacks / THREADS;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kPacks + threadIdx.x;
  Pack v[kPer], r[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) v[j] = a.x[base + j * THREADS];
  if constexpr (PAIR) {
#pragma unroll
    for (int j = 0; j < kPer; ++j) r[j] = a.res[base + j * THREADS];
#pragma unroll
    for (int j = 0; j < kPer; ++j) a.rout[base + j * THREADS] = r[j];
  }
#pragma unroll
  for (int j = 0; j < kPer; ++j) a.out[base + j * THREADS] = v[j];
}

int launch(void (*kernel)(Args), int grid, int threads, int cluster, cudaStream_t stream, const Args& a) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(threads);
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  if (cluster > 1) {
    attribute[0].id = cudaLaunchAttributeClusterDimension;
    attribute[0].val.clusterDim.x = cluster;
    attribute[0].val.clusterDim.y = 1;
    attribute[0].val.clusterDim.z = 1;
    config.attrs = attribute;
    config.numAttrs = 1;
  }
  return static_cast<int>(cudaLaunchKernelEx(&config, kernel, a));
}

constexpr int kUnsupported = -1;

template <int THREADS, int CL, bool FUSED>
int rows_with(const Args& a, cudaStream_t stream) {
  if constexpr ((kPacks / CL) % THREADS != 0) {
    return kUnsupported;
  } else {
    return launch(norm_rows<THREADS, CL, FUSED>, a.rows * CL, THREADS, CL, stream, a);
  }
}

template <int CL, bool FUSED>
int rows_threads(int threads, const Args& a, cudaStream_t stream) {
  switch (threads) {
    case 64: return rows_with<64, CL, FUSED>(a, stream);
    case 128: return rows_with<128, CL, FUSED>(a, stream);
    case 256: return rows_with<256, CL, FUSED>(a, stream);
    case 512: return rows_with<512, CL, FUSED>(a, stream);
    default: return kUnsupported;
  }
}

template <bool FUSED>
int rows_cluster(int cluster, int threads, const Args& a, cudaStream_t stream) {
  switch (cluster) {
    case 1: return rows_threads<1, FUSED>(threads, a, stream);
    case 2: return rows_threads<2, FUSED>(threads, a, stream);
    case 4: return rows_threads<4, FUSED>(threads, a, stream);
    case 8: return rows_threads<8, FUSED>(threads, a, stream);
    default: return kUnsupported;
  }
}

template <bool FUSED>
int warp_rows(int warps, const Args& a, cudaStream_t stream) {
  const int grid = (a.rows + warps - 1) / warps;
  switch (warps) {
    case 2: return launch(norm_warp_rows<2, FUSED>, grid, 64, 1, stream, a);
    case 4: return launch(norm_warp_rows<4, FUSED>, grid, 128, 1, stream, a);
    case 8: return launch(norm_warp_rows<8, FUSED>, grid, 256, 1, stream, a);
    default: return kUnsupported;
  }
}

template <bool PAIR>
int copy_threads(int threads, const Args& a, cudaStream_t stream) {
  switch (threads) {
    case 128: return launch(copy_rows<128, PAIR>, a.rows, 128, 1, stream, a);
    case 256: return launch(copy_rows<256, PAIR>, a.rows, 256, 1, stream, a);
    case 512: return launch(copy_rows<512, PAIR>, a.rows, 512, 1, stream, a);
    default: return kUnsupported;
  }
}

Args make_args(const void* x, const void* res, const void* w, void* out, void* rout, int rows, float eps) {
  return Args{static_cast<const Pack*>(x), static_cast<const Pack*>(res), static_cast<const Pack*>(w),
              static_cast<Pack*>(out), static_cast<Pack*>(rout), rows, eps};
}

}  // namespace

// The entry points, for ctypes. Each returns 0, a cudaError_t, or -1 for a configuration not built.
// res and rout are read only when fused (or pair) is non-zero.
extern "C" {

int kc_norm_rows(const void* x, const void* res, const void* w, void* out, void* rout, int rows, float eps,
                 int threads, int cluster, int fused, void* stream) {
  const Args a = make_args(x, res, w, out, rout, rows, eps);
  const auto s = static_cast<cudaStream_t>(stream);
  return fused ? rows_cluster<true>(cluster, threads, a, s) : rows_cluster<false>(cluster, threads, a, s);
}

int kc_norm_warp_rows(const void* x, const void* res, const void* w, void* out, void* rout, int rows, float eps,
                      int warps, int fused, void* stream) {
  const Args a = make_args(x, res, w, out, rout, rows, eps);
  const auto s = static_cast<cudaStream_t>(stream);
  return fused ? warp_rows<true>(warps, a, s) : warp_rows<false>(warps, a, s);
}

int kc_copy_rows(const void* x, const void* res, void* out, void* rout, int rows, int threads, int pair, void* stream) {
  const Args a = make_args(x, res, nullptr, out, rout, rows, 0.f);
  const auto s = static_cast<cudaStream_t>(stream);
  return pair ? copy_threads<true>(threads, a, s) : copy_threads<false>(threads, a, s);
}

}  // extern "C"
