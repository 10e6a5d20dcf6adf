// Rotary embedding (NeoX layout, in place on q and k) written directly in CUDA C++, for one question
// of issue 6: the Triton kernel runs 3 points of the datasheet below copies of its bytes, and its
// profile has it waiting on loads at 56% occupancy. Is that the design or Triton's code for it?
// Built and timed by benchmarks/kernels_variants.py --round 14; an experiment, not a shipped kernel
// (bf16 q and k, contiguous [T, H, 128], int64 positions, an fp32 [P, 128] cos/sin cache).
//
// Each thread rotates 8 pairs of one head: it loads 8 bf16 of the first half and the 8 they pair
// with in the second half (two 16-byte loads), 8 cos and 8 sin (four 16-byte loads from the
// token's cache row), and stores two 16-byte words back.
//   rope_heads<HEADS>  one CTA per group of HEADS heads of one token (the Triton kernel's grid)
//   rope_token         one CTA per token, all query and key heads
// With `gathered`, pos is ignored and token t reads row t of the cache: the caller has gathered the
// rows beforehand, so no load waits on another (the A/B for the position-dependent read).

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int kHeadWords = 16;  // 16-byte words in a head of 128 bf16
constexpr int kChunks = 8;      // threads per head: 8 pairs each
constexpr int kCacheRow = 32;   // float4 in a cache row of 128 fp32 (cos, then sin)

struct RopeArgs {
  const int64_t* pos;
  uint4* q;
  uint4* k;
  const float4* cache;
  int hq;
  int hk;
  bool gathered;
};

__device__ __forceinline__ const float4* cache_row(const RopeArgs& a, int64_t t) {
  return a.cache + (a.gathered ? t : a.pos[t]) * kCacheRow;
}

__device__ __forceinline__ float2 unpack(uint32_t word) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&word));
}

__device__ __forceinline__ uint32_t pack(float a, float b) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Rotate pairs 8c .. 8c+7 of the head at `head` (first-half word c, second-half word c + 8).
__device__ __forceinline__ void rotate_chunk(uint4* head, int c, const float4* cache_row) {
  const uint4 lo = head[c], hi = head[c + kChunks];
  const float4 c0 = cache_row[2 * c], c1 = cache_row[2 * c + 1];
  const float4 s0 = cache_row[kCacheRow / 2 + 2 * c], s1 = cache_row[kCacheRow / 2 + 2 * c + 1];
  const float cs[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
  const float sn[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
  const uint32_t a[4] = {lo.x, lo.y, lo.z, lo.w}, b[4] = {hi.x, hi.y, hi.z, hi.w};
  uint32_t first[4], second[4];
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    const float2 fa = unpack(a[w]), fb = unpack(b[w]);
    const float ca = cs[2 * w], cb = cs[2 * w + 1], sa = sn[2 * w], sb = sn[2 * w + 1];
    first[w] = pack(fa.x * ca - fb.x * sa, fa.y * cb - fb.y * sb);
    second[w] = pack(fb.x * ca + fa.x * sa, fb.y * cb + fa.y * sb);
  }
  head[c] = make_uint4(first[0], first[1], first[2], first[3]);
  head[c + kChunks] = make_uint4(second[0], second[1], second[2], second[3]);
}

template <int HEADS>
__global__ void __launch_bounds__(HEADS * kChunks) rope_heads(RopeArgs a) {
  const int qg = (a.hq + HEADS - 1) / HEADS, kg = (a.hk + HEADS - 1) / HEADS;
  const int64_t t = blockIdx.x / (qg + kg);
  const int g = static_cast<int>(blockIdx.x % (qg + kg));
  const bool is_q = g < qg;
  const int head = (is_q ? g : g - qg) * HEADS + static_cast<int>(threadIdx.x) / kChunks;
  if (head >= (is_q ? a.hq : a.hk)) return;
  uint4* row = is_q ? a.q + (t * a.hq + head) * kHeadWords : a.k + (t * a.hk + head) * kHeadWords;
  rotate_chunk(row, static_cast<int>(threadIdx.x) % kChunks, cache_row(a, t));
}

__global__ void rope_token(RopeArgs a) {
  const int64_t t = blockIdx.x;
  const int head = static_cast<int>(threadIdx.x) / kChunks;
  uint4* row = head < a.hq ? a.q + (t * a.hq + head) * kHeadWords : a.k + (t * a.hk + head - a.hq) * kHeadWords;
  rotate_chunk(row, static_cast<int>(threadIdx.x) % kChunks, cache_row(a, t));
}

}  // namespace

// The entry point, for ctypes: returns 0, a cudaError_t, or -1 for a configuration not built.
// heads = 0 launches rope_token; gathered != 0 reads cache row t for token t.
extern "C" int kc_rope(const void* pos, void* q, void* k, const void* cache, int tokens, int hq, int hk, int heads,
                       int gathered, void* stream) {
  const RopeArgs a{static_cast<const int64_t*>(pos), static_cast<uint4*>(q), static_cast<uint4*>(k),
                   static_cast<const float4*>(cache), hq, hk, gathered != 0};
  const auto s = static_cast<cudaStream_t>(stream);
  const auto groups = [&](int h) { return tokens * ((hq + h - 1) / h + (hk + h - 1) / h); };
  switch (heads) {
    case 0: rope_token<<<tokens, (hq + hk) * kChunks, 0, s>>>(a); break;
    case 4: rope_heads<4><<<groups(4), 4 * kChunks, 0, s>>>(a); break;
    case 8: rope_heads<8><<<groups(8), 8 * kChunks, 0, s>>>(a); break;
    case 16: rope_heads<16><<<groups(16), 16 * kChunks, 0, s>>>(a); break;
    case 32: rope_heads<32><<<groups(32), 32 * kChunks, 0, s>>>(a); break;
    default: return -1;
  }
  return static_cast<int>(cudaGetLastError());
}
