#include "tools/model_args.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <stdexcept>

namespace tgc::cli {
namespace {

std::pair<std::string, std::string> splitKV(const std::string& s, const char* flag) {
  size_t eq = s.find('=');
  if (eq == std::string::npos || eq == 0)
    throw std::invalid_argument(fmt::format("{} {}: expected NAME=VALUE", flag, s));
  return {s.substr(0, eq), s.substr(eq + 1)};
}

}  // namespace

void addModelArgs(CLI::App* cmd, ModelArgs& a) {
  cmd->add_option("MODEL", a.model, "Model file in the tgc model language (.tg)")->required();
  cmd->add_option("-g,--graph", a.graph, "Graph of the model file (default: train, else the first)")
      ->option_text("NAME");
  cmd->add_option("--preset", a.preset, "Named preset of the model's config (tiny, small, base)")
      ->option_text("NAME");
  cmd->add_option("--set", a.sets, "Override a config entry: --set d_model=384 (repeatable)")
      ->option_text("KEY=VALUE")
      ->allow_extra_args(false);
  cmd->add_option("--dim", a.dims, "Bind a named dim: --dim B=16 (repeatable)")
      ->option_text("NAME=SIZE")
      ->allow_extra_args(false);
  cmd->add_option("--lib", a.libs, "Extra folder searched for imports (repeatable)")
      ->option_text("DIR")
      ->allow_extra_args(false);
}

CLI::Option* addPrecisionOption(CLI::App* cmd, DType& dtype) {
  return cmd->add_option_function<std::string>(
         "--precision",
         [&dtype](const std::string& v) { dtype = v == "bf16" ? DType::bf16 : DType::f32; },
         "Matmul precision: fp32 (default) or bf16 (bf16 operands, f32 accumulation; "
         "f32 master weights, optimizer and every other op)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->option_text("fp32|bf16");
}

ModelOptions toModelOptions(const ModelArgs& a) {
  ModelOptions m;
  m.graph = a.graph;
  m.preset = a.preset;
  m.lib_paths = a.libs;
  for (const auto& s : a.sets) m.sets.push_back(splitKV(s, "--set"));
  for (const auto& d : a.dims) {
    auto [k, v] = splitKV(d, "--dim");
    errno = 0;
    char* end = nullptr;
    long long n = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end || errno == ERANGE)
      throw std::invalid_argument(fmt::format("--dim {}: '{}' is not an integer", k, v));
    m.dims.emplace_back(k, n);
  }
  return m;
}

}  // namespace tgc::cli
