// NVRTC, the CUDA runtime compiler, opened at run time.
//
// tgc links no CUDA library: libnvrtc is opened with dlopen on first use (libnvrtc.so.13,
// libnvrtc.so, then the same names under $CUDA_HOME/lib64, $CUDA_PATH/lib64 and
// /usr/local/cuda/lib64; $TGC_NVRTC instead names the one file to open), so one `tgc`
// binary runs with and without the CUDA toolkit.
// Without it, every compile throws NvrtcUnavailable saying what was tried.
//
// Two products:
//   compilePtx(source, name, "compute_90")  PTX for a virtual architecture: what exists
//                                           when no device is there (tgc compile --emit=ptx)
//   compileCubin(source, name, "sm_90")     machine code for the device's architecture
//                                           (DeviceInfo::arch()), loaded by the runtime
// Both compile C++17 with IEEE division and square root, denormals kept and FMA
// contraction on (the CPU emitter's `contract`), never --use_fast_math: the interpreter's
// accuracy. A failed compile throws NvrtcError whose message holds NVRTC's log and the
// source with line numbers.
//
// Results are cached on disk like CPU kernels (codegen/jit.h): <cache dir>/cuda/<key>.ptx
// or .cubin, key = SHA-256 of (product, architecture, options, source, NVRTC version), in
// the directory codegen::defaultCacheDir() names ($TGC_CACHE_DIR, ...). TGC_NO_CACHE=1 in
// the environment turns it off. Thread-safe: programs compile concurrently.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace tgc::codegen::cuda {

// A compile failed: the message carries the NVRTC log and the numbered source.
struct NvrtcError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// libnvrtc could not be opened (or lacks an entry point): the message says what was tried.
struct NvrtcUnavailable : NvrtcError {
  using NvrtcError::NvrtcError;
};

// Empty when libnvrtc can be opened; otherwise why not. Never throws (tests skip with it).
std::string nvrtcUnavailableReason();

// "13.0": the version of the opened libnvrtc; throws NvrtcUnavailable.
std::string nvrtcVersion();

struct NvrtcOptions {
  std::vector<std::string> extra;  // more NVRTC options, e.g. "-lineinfo", "-DTILE=64"
  bool useCache = true;
  std::string cacheDir;  // empty: codegen::defaultCacheDir()

  // The defaults, with TGC_NO_CACHE=1 in the environment turning the cache off.
  static NvrtcOptions fromEnv();
};

enum class Product { Ptx, Cubin };

struct NvrtcResult {
  std::string image;  // PTX text (without a trailing NUL) or CUBIN bytes
  std::string log;    // NVRTC's log (warnings), empty when it had nothing to say
  bool cacheHit = false;
};

// `name` names the program in errors and logs ("enc_2_attn_softmax" -> enc_2_attn_softmax.cu).
// `arch`: a virtual architecture for PTX ("compute_90"), a real one for CUBIN ("sm_90").
NvrtcResult compilePtx(const std::string& source, const std::string& name,
                       const std::string& arch = "compute_90",
                       const NvrtcOptions& options = NvrtcOptions::fromEnv());
NvrtcResult compileCubin(const std::string& source, const std::string& name,
                         const std::string& arch = "sm_90",
                         const NvrtcOptions& options = NvrtcOptions::fromEnv());

// The source with each line prefixed by its number, as compile errors show it.
std::string numberedSource(const std::string& source);

}  // namespace tgc::codegen::cuda
