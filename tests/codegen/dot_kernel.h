#pragma once
// The dot kernel the codegen tests share: out[M, N] = (c or 0) + A B, A read as [M, K] or as
// the transpose of a [K, M] array (and B as [K, N] or from [N, K]), so the operands arrive in
// different layouts.
#include <string>

#include "dsl/dsl.h"

namespace tilec::codegen::test {

inline ir::Kernel dot_kernel(const std::string& name, int64_t m, int64_t n, int64_t k, ir::DType dt, bool trans_a,
                             bool trans_b, bool with_acc) {
  using namespace dsl;
  KernelBuilder kb(name);
  auto a = kb.arg(ptr_to(dt), "a");
  auto b = kb.arg(ptr_to(dt), "b");
  auto acc = kb.arg(ptr_to(ir::DType::f32), "c");
  auto out = kb.arg(ptr_to(ir::DType::f32), "out");
  auto mi = arange(0, m), ni = arange(0, n), ki = arange(0, k);
  Tile at = trans_a ? trans(load(a + ki.col() * m + mi.row())) : load(a + mi.col() * k + ki.row());
  Tile bt = trans_b ? trans(load(b + ni.col() * k + ki.row())) : load(b + ki.col() * n + ni.row());
  Tile off = mi.col() * n + ni.row();
  Tile r = with_acc ? dot(at, bt, load(acc + off)) : dot(at, bt);
  store(out + off, r);
  return kb.finish();
}

} // namespace tilec::codegen::test
