#include "codegen/layout_print.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

#include "codegen/axis_info.h"
#include "codegen/layout_plan.h"
#include "codegen/pipeline_plan.h"
#include "ir/printer.h"

namespace tilec::codegen {

namespace {

using ir::Op;
using ir::OpKind;
using ir::Value;

bool maps(const Layout& l, int b) { return std::find(l.dims.begin(), l.dims.end(), b) != l.dims.end(); }

// The legend: layouts numbered in the order the print first names them, each
// slice's parent before the slice.
class Legend {
public:
  explicit Legend(const LayoutPlan& plan) : plan_(plan) {}

  std::string name(LayoutId id) { return id == kScalar ? "scalar" : fmt::format("#L{}", index(id)); }

  // The legend number of a plan layout.
  int index(LayoutId id) {
    auto it = by_id_.find(id);
    if (it == by_id_.end()) {
      it = by_id_.emplace(id, add(plan_.layout(id))).first;
      std::string& def = defs_[size_t(it->second)];
      const Layout& l = plan_.layout(id);
      const std::string note = !l.base.warp_order.empty()
                                   ? std::string("  // wgmma m64nNk16 accumulator, warpgroups along N: warp 4q + r holds rows "
                                                 "16r + g, 16r + g + 8 of warpgroup q's columns")
                               : !l.base.warp_repeat.empty()
                                   ? std::string("  // wgmma m64nNk16 accumulator: warp w holds rows 16w + g, 16w + g + 8")
                                   : fmt::format("  // mma.sync m16n8 accumulator fragments, warps along {}",
                                                 l.base.warps_per_block.at(0) > 1 ? "M" : "N");
      if (plan_.is_mma(id) && def.find("  // ") == std::string::npos) def += note;
    }
    return it->second;
  }

  int size() const { return static_cast<int>(defs_.size()); }

  std::string text() const {
    std::string s;
    for (size_t i = 0; i < defs_.size(); ++i) s += fmt::format("#L{} = {}\n", i, defs_[i]);
    return s;
  }

private:
  int add(const Layout& l) {
    for (size_t i = 0; i < layouts_.size(); ++i)
      if (layouts_[i] == l) return static_cast<int>(i);
    std::string def = describe(l);
    layouts_.push_back(l);
    defs_.push_back(std::move(def));
    return static_cast<int>(layouts_.size() - 1);
  }

  // In tile dims, as Triton writes them. A base dim no tile dim maps to
  // (threads along it hold the same elements) makes the layout a slice of a
  // parent that maps it too.
  std::string describe(const Layout& l) {
    const BlockedLayout& b = l.base;
    for (int u = 0; u < b.rank(); ++u) {
      if (maps(l, u)) continue;
      Layout parent = l;
      int at = static_cast<int>(std::count_if(l.dims.begin(), l.dims.end(), [u](int d) { return d < u; }));
      parent.dims.insert(parent.dims.begin() + at, u);
      return fmt::format("slice<dim={}, parent=#L{}>", at, add(known_parent(parent, u)));
    }
    auto tile = [&](const std::vector<int>& per_base) {
      std::vector<int> r;
      for (int d : l.dims) r.push_back(per_base[d]);
      return fmt::format("[{}]", fmt::join(r, ","));
    };
    auto dims_of = [&](const std::vector<int>& base_order) {
      std::vector<int> order;
      for (int bd : base_order)
        order.push_back(static_cast<int>(std::find(l.dims.begin(), l.dims.end(), bd) - l.dims.begin()));
      return order;
    };
    return fmt::format("blocked<size_per_thread={}, threads_per_warp={}, warps_per_block={}, order=[{}]{}{}>",
                       tile(b.size_per_thread), tile(b.threads_per_warp), tile(b.warps_per_block),
                       fmt::join(dims_of(b.order), ","),
                       b.warp_repeat.empty() ? "" : fmt::format(", warp_repeat={}", tile(b.warp_repeat)),
                       b.warp_order.empty() ? "" : fmt::format(", warp_order=[{}]", fmt::join(dims_of(b.warp_order), ",")));
  }

  // Slicing drops the size per thread along the sliced dim, so the layout a
  // reduce read from matches but for that; naming it keeps the legend short.
  Layout known_parent(const Layout& parent, int u) const {
    auto same = [&](Layout p) {
      if (p.dims != parent.dims || p.base.rank() != parent.base.rank()) return false;
      p.base.size_per_thread[u] = parent.base.size_per_thread[u];
      return p == parent;
    };
    for (const Layout& p : layouts_)
      if (same(p)) return p;
    for (LayoutId id = 0; id < plan_.num_layouts(); ++id)
      if (same(plan_.layout(id))) return plan_.layout(id);
    return parent;
  }

  const LayoutPlan& plan_;
  std::unordered_map<LayoutId, int> by_id_;
  std::vector<Layout> layouts_;
  std::vector<std::string> defs_;
};

class Annotator {
public:
  Annotator(const ir::Function& fn, int num_warps, bool wgmma)
      : axis_(fn), plan_(fn, axis_, num_warps, true, wgmma), legend_(plan_) {
    for (const auto& c : plan_.conversions()) {
      if (c.reshape) by_op_[c.reshape].push_back(&c);
      else by_value_[c.value].push_back(&c);
    }
  }

  ir::PrintHooks hooks() {
    ir::PrintHooks h;
    h.suffix = [this](const Op& op, const ir::PrintHooks::Ref&) { return suffix(op); };
    h.after = [this](const Op& op, const ir::PrintHooks::Ref& ref) {
      std::vector<std::string> lines;
      if (auto it = by_op_.find(&op); it != by_op_.end())
        for (const auto* c : it->second) lines.push_back(line(*c, ref) + " (reshape " + ref(op.results[0]) + ")");
      for (const Value* r : op.results) converted(r, ref, lines);
      if (op.kind == OpKind::Dot) {
        const ir::Shape& a = op.operands[0]->type.shape;
        if (plan_.is_wgmma(&op)) {
          const int64_t n = op.operands[1]->type.shape[1];
          const int64_t g = wgmma_groups_along_n(a[0], n, plan_.num_warps());
          const int eb = ir::dtype_bytes(op.operands[0]->type.dtype());
          auto staged = [&](int idx) {
            const bool k = plan_.wgmma_kmajor(&op, idx);
            const int64_t mn = idx == 0 ? a[0] : n;
            return fmt::format("{} {}, {}-byte swizzle", idx == 0 ? "A" : "B", k ? "k-major" : (idx == 0 ? "M-major" : "N-major"),
                               wgmma_swizzle((k ? a[1] : mn) * eb));
          };
          lines.push_back(fmt::format("// tensor cores: wgmma.mma_async.m64n{}k16 over {}x{}x{}, per warpgroup {} per "
                                      "k step of 16{}; operands in shared memory, {}, {}; accumulator and result in "
                                      "registers (the wgmma layout)",
                                      n / g, a[0], n, a[1], a[0] * g / (16 * plan_.num_warps()),
                                      g > 1 ? fmt::format(", {} warpgroups along N", g) : "", staged(0), staged(1)));
        } else
        lines.push_back(dot_on_tensor_cores(op)
                            ? fmt::format("// tensor cores: mma.sync.m16n8k16 over {}x{}x{} padded to {}x{}x{}, "
                                          "operands staged in shared memory, fragments by ldmatrix where rows "
                                          "hold 8 elements; {}",
                                          a[0], op.operands[1]->type.shape[1], a[1], std::max<int64_t>(a[0], 16),
                                          std::max<int64_t>(op.operands[1]->type.shape[1], 8),
                                          std::max<int64_t>(a[1], 16),
                                          plan_.is_mma(plan_.op_layouts(&op)[2])
                                              ? "accumulator and result in registers (the MMA layout)"
                                              : "accumulator and result through shared memory")
                            : std::string("// CUDA cores: FMA over operands staged in shared memory"));
      }
      return lines;
    };
    h.region_start = [this](const Op& op, size_t i, const ir::PrintHooks::Ref& ref) {
      std::vector<std::string> lines;
      if (op.kind == OpKind::For && i == 0)
        for (const Value* a : op.region(0).args) converted(a, ref, lines);
      return lines;
    };
    return h;
  }

  Legend& legend() { return legend_; }
  const LayoutPlan& plan() const { return plan_; }
  int lines() const { return lines_; }

private:
  // The layouts of the op's results, or the layout a store writes from.
  std::string suffix(const Op& op) {
    std::vector<std::string> parts;
    for (const Value* r : op.results) parts.push_back(layouts_of(r));
    if (op.kind == OpKind::Store) parts.push_back(legend_.name(plan_.op_layouts(&op)[0]));
    if (parts.empty()) return "";
    return fmt::format("  : {}", fmt::join(parts, ", "));
  }

  std::string layouts_of(const Value* v) {
    if (v->type.is_scalar()) return "scalar";
    LayoutId n = plan_.native(v);
    if (n != kNone) return legend_.name(n);
    std::vector<int> ids;
    for (LayoutId l : plan_.requests(v)) ids.push_back(legend_.index(l));
    if (ids.empty()) return "unused";
    std::sort(ids.begin(), ids.end());
    std::vector<std::string> names;
    for (int i : ids) names.push_back(fmt::format("#L{}", i));
    return fmt::format("{}", fmt::join(names, " | "));
  }

  void converted(const Value* v, const ir::PrintHooks::Ref& ref, std::vector<std::string>& lines) {
    if (auto it = by_value_.find(v); it != by_value_.end())
      for (const auto* c : it->second) lines.push_back(line(*c, ref));
  }

  std::string line(const LayoutPlan::Conversion& c, const ir::PrintHooks::Ref& ref) {
    ++lines_;
    return fmt::format("convert_layout {} : {} -> {}", ref(c.value), legend_.name(c.from), legend_.name(c.to));
  }

  AxisAnalysis axis_;
  LayoutPlan plan_;
  Legend legend_;
  std::unordered_map<const Op*, std::vector<const LayoutPlan::Conversion*>> by_op_;
  std::unordered_map<const Value*, std::vector<const LayoutPlan::Conversion*>> by_value_;
  int lines_ = 0;
};

// The pipeline plan's lines, values named by `ref`.
std::string describe_pipelines(const ir::Function& fn, const PipelinePlan& plan, int num_warps,
                               const ir::PrintHooks::Ref& ref) {
  auto names = [&](const std::vector<const Op*>& ops) {
    std::vector<std::string> r;
    for (const Op* o : ops) r.push_back(o->results.empty() ? std::string(ir::op_name(o->kind)) : ref(o->results[0]));
    return r.empty() ? std::string("none") : fmt::format("{}", fmt::join(r, " "));
  };
  auto operand = [&](const Op* dot, int idx) {
    return fmt::format("{} of {} = dot", idx == 0 ? "A" : "B", ref(dot->results[0]));
  };
  auto staged = [&](const PipelinePlan::AsyncOperand& x) {
    std::string from = fmt::format("{} = load", ref(x.load->results[0]));
    if (x.transpose) from += fmt::format(" through {} = permute", ref(x.transpose->results[0]));
    const MmaStaging& st = x.staging;
    // Other dots reading the same copy (one staging of a value both read as B: MLA's K tile).
    std::string also;
    ir::walk(const_cast<ir::Block&>(fn.body), [&](Op& o) {
      if (o.kind == OpKind::Dot && &o != x.dot && plan.async_operand(&o, x.idx) == &x)
        also += fmt::format(", read as {} too", operand(&o, x.idx));
    });
    return fmt::format("{}, copied from {}: {} rows of {} bytes, one per {} ({} bytes){}", operand(x.dot, x.idx), from,
                       st.rows, st.row_bytes, !st.kmajor ? "k" : x.idx == 0 ? "m" : "n", st.bytes(), also);
  };
  auto loop_name = [&](const Op* loop) {
    return fmt::format("for {} ({} stages)", ref(loop->region(0).args[0]), loop->attrs.num_stages);
  };
  std::string s = fmt::format("// pipelines of @{} for num_warps={}: {} of {} loop{} with stages pipelined, {} "
                              "operand{} copied by cp.async\n",
                              fn.name, num_warps, plan.pipelines().size(), plan.staged_loops().size(),
                              plan.staged_loops().size() == 1 ? "" : "s", plan.async_operands().size(),
                              plan.async_operands().size() == 1 ? "" : "s");
  for (const Op* loop : plan.staged_loops()) {
    if (const PipelinePlan::Pipeline* pl = plan.pipeline_of(loop)) {
      s += fmt::format("// {}: pipelined: each iteration's copies issued {} iteration{} ahead, into {} rotating "
                       "buffers of {} bytes{}: shared memory [{}, {})\n",
                       loop_name(loop), pl->stages - 1, pl->stages == 2 ? "" : "s", pl->stages, pl->stage_bytes,
                       pl->has_late() ? fmt::format(" and one late buffer of {} bytes", pl->late_bytes) : "",
                       pl->base, pl->end());
      for (size_t i = 0; i < pl->operands.size(); ++i)
        s += fmt::format("//   {}slot {} at +{}: {}\n", pl->late[i] ? "late " : "", i,
                         (pl->late[i] ? pl->late_base() - pl->base : 0) + pl->offsets[i],
                         staged(plan.async_operands()[size_t(pl->operands[i])]));
      if (pl->has_late())
        s += "//   late slots: copied at the end of the trip before, after its last barrier; their dot waits for "
             "them\n";
      if (pl->warp_specialized)
        s += fmt::format("//   warp specialized: warpgroup {} (threads {}-{}) issues every copy, {} empty mbarriers "
                         "from byte {}\n",
                         num_warps / 4, 32 * num_warps, 32 * num_warps + 127, pl->stages, pl->empty_mbarriers);
      else if (loop->attrs.warp_specialize)
        s += "//   not warp specialized: only a loop at the kernel's top level, after no op but scalar arithmetic "
             "and constants, whose one dot keeps a wgmma group in flight, in a block of at most 28 warps, is\n";
      std::vector<const Op*> kept; // the others only feed the copies: not emitted in the body
      for (const Op* o : pl->slice)
        if (!plan.deferred(o)) kept.push_back(o);
      s += fmt::format("//   issued ahead, in body order: {}; of these, emitted in the body too: {}\n",
                       names(pl->slice), names(kept));
    }
    for (const PipelinePlan::NotPipelined& n : plan.not_pipelined()) {
      if (n.loop != loop) continue;
      std::string why = n.value ? ref(n.value) + " " + n.why : n.why;
      if (!n.dot) s += fmt::format("// {}: not pipelined: it {}\n", loop_name(loop), why);
      else s += fmt::format("//   not copied ahead: {}: {}\n", operand(n.dot, n.idx), why);
    }
  }
  for (const PipelinePlan::AsyncOperand& x : plan.async_operands())
    if (x.pipeline < 0) s += fmt::format("// copied by its dot, one cp.async group: {}\n", staged(x));
  return s;
}

} // namespace

std::string print_pipelines(const ir::Function& fn, const CompileOptions& opts) {
  AxisAnalysis axis(fn, opts.int_arg_divisibility, opts.int_arg_values);
  LayoutPlan layouts(fn, axis, opts.num_warps, opts.tensor_cores, wgmma_enabled(opts));
  PipelinePlan plan(fn, layouts, opts.tensor_cores);
  if (plan.staged_loops().empty() && plan.async_operands().empty()) return "";
  // The IR's print numbers the values; its first op's suffix sees every name.
  std::string text;
  ir::PrintHooks hooks;
  hooks.suffix = [&](const Op&, const ir::PrintHooks::Ref& ref) {
    if (text.empty()) text = describe_pipelines(fn, plan, opts.num_warps, ref);
    return std::string();
  };
  ir::print(fn, hooks);
  return text;
}

LayoutsPrint print_layouts(const ir::Function& fn, int num_warps, bool wgmma) {
  Annotator a(fn, num_warps, wgmma);
  std::string ir = ir::print(fn, a.hooks());
  internal_assert(a.lines() == static_cast<int>(a.plan().conversions().size()),
                  "every conversion of the plan is printed once");
  LayoutsPrint r;
  r.layouts = a.legend().size();
  r.conversions = a.lines();
  r.text = fmt::format("// layouts of @{} for num_warps={}: {} layout{}, {} conversion{}\n", fn.name, num_warps,
                       r.layouts, r.layouts == 1 ? "" : "s", r.conversions, r.conversions == 1 ? "" : "s") +
           a.legend().text() + "\n" + ir;
  return r;
}

} // namespace tilec::codegen
