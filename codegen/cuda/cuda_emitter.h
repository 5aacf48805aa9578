// The GPU back end of Kernel IR: each kir::Kernel printed as readable CUDA C++, compiled
// by NVRTC (codegen/cuda/nvrtc.h). The same tree the LLVM emitter turns into CPU code.
//
// ABI. One `extern "C" __global__` function per kernel, named kir::Kernel::name (the
// provenance name, "enc_2_attn_softmax"), with one parameter per buffer in
// Kernel::buffers order, then the parallel range:
//     extern "C" __global__ void name(float* __restrict__ b0_out, const float* __restrict__
//                                     b1_x, ..., long long begin, long long end)
// A buffer parameter is a device pointer to the buffer's elements (const when only read;
// bool as one byte, bf16/f16 as their 16 bits); buffers one kernel shares in place
// (BufferDecl::inPlaceOf) lose __restrict__. cuLaunchKernel gets the address of each
// pointer, then of begin and end (int64); the launch runs parallel iterations [begin, end).
// Per-buffer parameters rather than the CPU's pointer table: no table to upload per
// launch, and NVCC sees which buffers are read-only and unaliased (ld.global.nc).
//
// Mapping of the loop nest to the grid. Kernel IR promises two kinds of independence:
// the parallel iterations p, and the iterations of a LoopKind::Vector loop (apart from
// accumulating locals). Both become GPU parallelism, and so does a whole loop nest whose
// iterations cannot interact (below); so every emitted kernel computes what the CPU
// kernel computes. The lowering sizes p for a few CPU threads (often 32..1024
// iterations), far too few for a GPU, which is why the inner loops matter:
//  - ThreadPerElement (elementwise kernels): the body inside p is a perfect nest of loops
//    around loop-free statements, every local is a per-element temporary, and no buffer
//    the kernel stores is also loaded. Then no element's work reads another's results, so
//    p and all the loops flatten into one index over the grid, one thread per element
//    (f -> p, i, j by division), consecutive threads on consecutive innermost elements.
//    A body `if (p == last) nest else nest` (lowering's blocks of a long row, the last
//    one shorter) flattens too, over the larger extents, the shorter nest guarded. (This
//    assumes, as every lowering template does, that distinct iterations store distinct
//    elements.) 1014 of the base training step's 1446 kernels map this way.
//  - BlockPerIteration (the kernel has a Vector loop whose iterations can be spread):
//    one thread block per parallel iteration (a grid-stride loop over blocks, so the grid
//    may be smaller than the range). Within the block, the code outside Vector loops runs
//    on every thread alike ("uniform": loop counters and locals are the same in every
//    thread), and each spreadable Vector loop is divided among the block's threads
//    (j = threadIdx.x; j < n; j += blockDim.x), so consecutive threads touch consecutive
//    elements (coalesced). A local accumulated in such a loop (acc = acc + e, max, min) is
//    a reduction: every thread accumulates its share from the identity, then a warp-shuffle
//    and shared-memory block reduction combines the shares and every thread gets the total.
//    Stores in uniform code are done by thread 0 alone. __syncthreads() follows a spread
//    loop or uniform store whose results another thread may read (the kernel loads a
//    buffer it stores), and precedes one that may overwrite what others still read.
//  - ThreadPerIteration (no spreadable Vector loop of 32 or more iterations: scalar
//    kernels, scans, short rows): one thread per parallel iteration, the body serial.
// A Vector loop is spread when each local it assigns is either such a reduction or private
// to an iteration (assigned first thing in the body, unused outside); other Vector loops,
// and Vector loops nested in a spread one, run serially in each thread.
//
// Numerics follow the interpreter as the CPU emitter does: CUDA's IEEE-accurate device
// functions (expf, logf, tanhf, erff: a few ulp; no fast math), f32 pow through double,
// NaN-propagating max/min, integer division defined for every input (x / 0 = 0), float to
// int casts truncating and saturating (NaN gives 0: cvt.rzi), bool as a byte, bf16/f16
// stores rounding to nearest even. Reductions add in a different order than the CPU (a
// tree across threads), so sums differ in the last bits.
//
// Not yet: reductions across blocks (a parallel iteration that reduces a whole large
// tensor, e.g. a gradient norm, runs on one block), shared-memory tiles for transposes,
// and GPU-sized parallel extents from the lowering itself.
//
// Tested without a GPU: golden texts (tests/codegen/cuda_emitter_test.cpp), every kernel
// of the base training step through NVRTC and ptxas (cuda_ptx_test.cpp), and a small
// training step's kernels run under a CPU emulation of the CUDA execution model against
// the CPU backend (cuda_emulation_test.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codegen/kernel_ir.h"

namespace tgc::codegen::cuda {

enum class Mapping { ThreadPerIteration, BlockPerIteration, ThreadPerElement };

// How to launch an emitted kernel over parallel iterations [begin, end).
struct LaunchGeometry {
  Mapping mapping = Mapping::ThreadPerIteration;
  int blockThreads = 128;  // blockDim.x (blockDim.y = blockDim.z = 1)
  int sharedBytes = 0;     // dynamic shared memory (emitted kernels use static shared only)
  int64_t elementsPerIteration = 1;  // ThreadPerElement: threads per parallel iteration
  // gridDim.x for `iterations` = end - begin parallel iterations (at least 1 block, at most
  // kMaxGridBlocks: the kernel's grid-stride loop covers the rest). Blocks: one per
  // iteration, or enough threads for one per iteration (or per element).
  int64_t gridBlocks(int64_t iterations) const;
};

inline constexpr int64_t kMaxGridBlocks = 65535LL * 32;

struct CudaKernel {
  std::string name;    // the extern "C" symbol (kir::Kernel::name)
  std::string source;  // a complete translation unit: helpers, then the kernel
  LaunchGeometry launch;
  int64_t parallelExtent = 1;  // the kernel's full range is [0, parallelExtent)
};

// Verifies `k` (std::logic_error when malformed) and prints it. Throws std::logic_error
// for what CUDA cannot express the same way (none known for verified kernels).
CudaKernel emitCudaKernel(const kir::Kernel& k);

// The pieces of a translation unit, for compiling many kernels in one NVRTC program:
// cudaPreamble() once, then each kernelFunction(); names must differ.
std::string cudaPreamble();
std::string kernelFunction(const kir::Kernel& k, LaunchGeometry* launch = nullptr);

}  // namespace tgc::codegen::cuda
