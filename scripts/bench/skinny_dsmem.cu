// Probe (issue 18): the skinny split-K GEMM with its reduction in a cluster's distributed
// shared memory, for C[M, N] = A[M, K] @ B[K, N], bf16 row-major, fp32 accumulation, M <= 32,
// N a multiple of 64, K a multiple of SPLIT * 128.
//
// Grid (SPLIT, N / 64), cluster (SPLIT, 1, 1): the SPLIT CTAs of a cluster cover the K slices
// of one 32x64 output tile. Each streams its slice through a cp.async ring (6 stages of a
// 32x128 A tile and a 128x64 B tile) into mma.sync m16n8k16; its fp32 partial goes to its own
// shared memory; after a cluster barrier CTA r sums elements [r * 2048 / SPLIT, ...) of the
// tile over the SPLIT partials, in rank order (deterministic), reading the others' shared
// memory; a second cluster barrier keeps every CTA's shared memory alive until all have read.
// No global workspace, no atomics, no grid-wide residency: each cluster is on its own. The
// six stages (159 KB of shared memory) also keep one CTA per SM: with two, a cluster of 16
// could sit on 8 SMs.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cstdint>

namespace cg = cooperative_groups;

namespace {
constexpr int BM = 32, BN = 64, BK = 128, STAGES = 6, THREADS = 128;
constexpr int A_LD = BK + 8;  // padded rows: conflict-free ldmatrix
constexpr int B_LD = BN + 8;
constexpr int SMEM = STAGES * (BM * A_LD + BK * B_LD) * 2;

__device__ __forceinline__ void cp16(void* dst, const void* src, bool on) {
  uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  int n = on ? 16 : 0;  // zero-fill rows past M
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(n));
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}

__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void* p) {
  uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}

__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
}  // namespace

extern "C" __global__ void __launch_bounds__(THREADS)
    skinny_dsmem(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                 __nv_bfloat16* __restrict__ C, int M, int N, int K, int k_per_split) {
  extern __shared__ __align__(16) unsigned char smem[];
  __nv_bfloat16* sA = reinterpret_cast<__nv_bfloat16*>(smem);
  __nv_bfloat16* sB = sA + STAGES * BM * A_LD;
  float* sC = reinterpret_cast<float*>(smem);  // the partial, after the loop

  cg::cluster_group cluster = cg::this_cluster();
  const int split = blockIdx.x;  // its rank in the cluster
  const int n0 = blockIdx.y * BN;
  const int k0 = split * k_per_split;
  const int steps = k_per_split / BK;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;

  auto load = [&](int stage, int step) {
    const int kk = k0 + step * BK;
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // A: 32 rows x 16 chunks of 16 bytes
      const int c = tid + i * THREADS, r = c >> 4, col = (c & 15) * 8;
      const int rr = r < M ? r : 0;
      cp16(sA + stage * BM * A_LD + r * A_LD + col, A + (size_t)rr * K + kk + col, r < M);
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {  // B: 128 rows x 8 chunks
      const int c = tid + i * THREADS, r = c >> 3, col = (c & 7) * 8;
      cp16(sB + stage * BK * B_LD + r * B_LD + col, B + (size_t)(kk + r) * N + n0 + col, true);
    }
  };

  float acc[2][2][4] = {};
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < steps) load(s, s);
    asm volatile("cp.async.commit_group;\n" ::);
  }
  for (int step = 0; step < steps; ++step) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 2));
    __syncthreads();
    const int next = step + STAGES - 1;
    if (next < steps) load(next % STAGES, next);
    asm volatile("cp.async.commit_group;\n" ::);
    const __nv_bfloat16* a = sA + (step % STAGES) * BM * A_LD;
    const __nv_bfloat16* b = sB + (step % STAGES) * BK * B_LD;
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      uint32_t af[2][4], bf[4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
        ldsm_x4(af[mi], a + (mi * 16 + (lane & 15)) * A_LD + kk + (lane >> 4) * 8);
      ldsm_x4_t(bf, b + (kk + (lane & 15)) * B_LD + warp * 16 + (lane >> 4) * 8);
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        mma(acc[mi][0], af[mi], bf[0], bf[1]);
        mma(acc[mi][1], af[mi], bf[2], bf[3]);
      }
    }
  }
  asm volatile("cp.async.wait_group 0;\n" ::);
  __syncthreads();
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < 2; ++ni) {
      const int row = mi * 16 + (lane >> 2), col = warp * 16 + ni * 8 + (lane & 3) * 2;
      sC[row * BN + col] = acc[mi][ni][0];
      sC[row * BN + col + 1] = acc[mi][ni][1];
      sC[(row + 8) * BN + col] = acc[mi][ni][2];
      sC[(row + 8) * BN + col + 1] = acc[mi][ni][3];
    }
  cluster.sync();  // every partial written and visible across the cluster
  const int parts = cluster.num_blocks();
  const int share = BM * BN / parts;
  for (int e = split * share + tid; e < (split + 1) * share; e += THREADS) {
    float sum = 0.f;
#pragma unroll 8
    for (int q = 0; q < parts; ++q) sum += cluster.map_shared_rank(sC, q)[e];
    const int row = e / BN, col = e % BN;
    if (row < M) C[(size_t)row * N + n0 + col] = __float2bfloat16(sum);
  }
  cluster.sync();  // no CTA leaves while another still reads its shared memory
}

namespace {
// A launch of `split` x n/64 CTAs in clusters of `split` along K.
struct Launch {
  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t cfg = {};
  Launch(int split, int n, cudaStream_t stream) {
    cfg.gridDim = dim3(split, n / BN, 1);
    cfg.blockDim = dim3(THREADS, 1, 1);
    cfg.dynamicSmemBytes = SMEM;
    cfg.stream = stream;
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = split;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
};

cudaError_t prepare() {  // shared memory over 48 KB, clusters over 8
  cudaError_t e = cudaFuncSetAttribute(skinny_dsmem, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       SMEM);
  if (e != cudaSuccess) return e;
  return cudaFuncSetAttribute(skinny_dsmem, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
}
}  // namespace

// Host side: returns a cudaError_t (0: launched).
extern "C" int skinny_dsmem_launch(const void* A, const void* B, void* C, int M, int N, int K,
                                   int split, void* stream) {
  static cudaError_t ready = prepare();
  if (ready != cudaSuccess) return ready;
  Launch l(split, N, static_cast<cudaStream_t>(stream));
  return cudaLaunchKernelEx(&l.cfg, skinny_dsmem, static_cast<const __nv_bfloat16*>(A),
                            static_cast<const __nv_bfloat16*>(B),
                            static_cast<__nv_bfloat16*>(C), M, N, K, K / split);
}

// The most clusters of `split` CTAs that can be resident at once (0 on error).
extern "C" int skinny_dsmem_max_clusters(int split, int n) {
  if (prepare() != cudaSuccess) return 0;
  Launch l(split, n, nullptr);
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, skinny_dsmem, &l.cfg) != cudaSuccess) return 0;
  return clusters;
}
