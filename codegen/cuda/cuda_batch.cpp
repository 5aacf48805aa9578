#include "codegen/cuda/cuda_batch.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

namespace tgc::codegen::cuda {

std::vector<KernelModule> compileKernelModules(const std::vector<const kir::Kernel*>& kernels,
                                               Product product, const std::string& arch,
                                               int perModule, int threads,
                                               const NvrtcOptions& options) {
  std::set<std::string> names;
  for (const kir::Kernel* k : kernels)
    if (!names.insert(k->name).second)
      throw std::logic_error(fmt::format("compileKernelModules: two kernels are named {}", k->name));
  const size_t per = static_cast<size_t>(std::max(perModule, 1));
  std::vector<KernelModule> modules((kernels.size() + per - 1) / per);
  for (size_t m = 0; m < modules.size(); ++m) {
    KernelModule& km = modules[m];
    km.source = cudaPreamble();
    for (size_t i = m * per; i < std::min(kernels.size(), (m + 1) * per); ++i) {
      LaunchGeometry g;
      km.source += "\n" + kernelFunction(*kernels[i], &g);
      km.names.push_back(kernels[i]->name);
      km.launches.push_back(g);
    }
  }

  std::atomic<size_t> next{0};
  std::mutex mutex;
  std::exception_ptr failure;
  auto worker = [&] {
    for (size_t m; (m = next++) < modules.size();) {
      try {
        const std::string name = modules[m].names.front() + (modules[m].names.size() > 1 ? "_etc" : "");
        modules[m].compiled = product == Product::Ptx
                                  ? compilePtx(modules[m].source, name, arch, options)
                                  : compileCubin(modules[m].source, name, arch, options);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!failure) failure = std::current_exception();
        next = modules.size();
      }
    }
  };
  unsigned n = threads > 0 ? static_cast<unsigned>(threads) : std::thread::hardware_concurrency();
  n = std::clamp<unsigned>(n, 1, static_cast<unsigned>(std::max<size_t>(modules.size(), 1)));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < n; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
  return modules;
}

}  // namespace tgc::codegen::cuda
