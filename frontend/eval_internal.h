// What the evaluator's source files (eval*.cpp) share that is not part of its interface.
#pragma once

#include "frontend/eval.h"

namespace tgc::fe {

// Members hold methods by weak reference: a module storing its own method (or a parent's)
// would otherwise keep itself alive through a reference cycle.
inline Val toMemberForm(const Val& v) {
  if (v.k == VK::Fn && v.inst) {
    Val r = v;
    r.weak_inst = v.inst;
    r.inst.reset();
    r.b = true;  // a method, held weakly
    return r;
  }
  if (v.k == VK::List) {
    std::vector<Val> items;
    for (const Val& x : *v.list) items.push_back(toMemberForm(x));
    return Val::listOf(std::move(items));
  }
  return v;
}

// The inverse, on reading a member; a method whose instance is gone cannot be called.
inline Val fromMemberForm(const Val& v) {
  if (v.k == VK::Fn && v.b) {
    Val r = v;
    r.inst = v.weak_inst.lock();
    r.b = !r.inst;  // still set: the instance is gone
    return r;
  }
  if (v.k == VK::List) {
    std::vector<Val> items;
    for (const Val& x : *v.list) items.push_back(fromMemberForm(x));
    return Val::listOf(std::move(items));
  }
  return v;
}

}  // namespace tgc::fe
