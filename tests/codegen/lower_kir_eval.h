// A reference evaluator of Kernel IR for tests: a tree walk over a kir::Kernel with plain
// host buffers, independent of the LLVM emitter. f32 arithmetic rounds to float after every
// operation (as the compiled code does, up to reassociation); loads and stores are
// bounds-checked against the buffers' declared sizes, so a lowering bug that indexes out
// of range fails loudly here instead of corrupting memory.
#pragma once

#include <cstdint>

#include "codegen/kernel_ir.h"

namespace tgc::test {

// Runs parallel iterations [begin, end) of k on buffers (buffers[i] is k.buffers[i]).
// Throws std::logic_error on an out-of-bounds access or a malformed kernel.
void evalKernel(const codegen::kir::Kernel& k, void* const* buffers, int64_t begin, int64_t end);

}  // namespace tgc::test
