#pragma once
// A run described as data: everything a host needs to run a whole op (all its launches) for
// given sizes, without code of its own for that op. tilec writes it into the op's kernel
// card (<kernel>.kernel.toml, runtime/module_store.h) as the [run] table; rt::OpStore
// (runtime/op_store.h) and the C ABI (runtime/tilec.h) execute it. Every value below that is
// not a name is an expression over the sizes, the config and the lets (runtime/size_expr.h).
//
//   [[run.size]]          # in order: given by the caller, implied by a tensor's shape or dtype
//   name = "ctx"          # (a dim or dtype that is just this name), else `default`
//   default = "max_blocks * block_size"
//   key = true            # part of the tuning key (default); false: a helper value; a string:
//                         # part of it under that name
//
//   [[run.let]]           # in order, after the config is selected
//   name = "group"
//   value = "head_group == 0 ? hq / hkv : head_group"
//
//   [[run.tensor]]        # the caller's arrays, row-major and contiguous
//   name = "q"
//   role = "input"        # "output", or "inout": read and written in place (the caller's array,
//                         # never allocated for the caller; a binding passes it and gets it back)
//   dims = ["batch", "hq", "sq", "head_dim"]
//   dtype = "dtype"       # an expression naming the element type
//   accept = ["u32"]      # optional: other element types taken as they are (same width)
//   when = "alibi"        # optional: the tensor is given exactly when this is nonzero
//
//   [[run.scalar]]        # the caller's scalars, passed as the module's parameter of that name
//   name = "softmax_scale"
//   type = "f32"
//   when = "softcap"      # optional, as for tensors
//
//   [[run.check]]         # after the lets: arguments for which `what` is 0 are refused with
//   what = 'slot_dtype == "i64" || slot_dtype == "i32"'  # the message (and the tuning key)
//   message = "slot_mapping holds int64 or int32 slots"
//
//   [[run.workspace]]     # scratch the run needs, carved from one workspace (256-byte aligned)
//   name = "partial_o"
//   dtype = "f32"
//   elements = "batch * hq * sq * num_splits * head_dim"
//   when = "num_splits > 1"
//
//   [run.spec]            # the specialization every module of the run is looked up with
//   head_dim = "head_dim"
//
//   [[run.launch]]        # in order; each module parameter binds by name to a tensor, a
//   kernel = "paged_attention"   # workspace buffer, a scalar, a size, a config value or a let
//   grid = ["batch", "hkv * (hq / hkv / group)", "num_splits"]
//   when = "num_splits > 1"      # optional
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "abi/types.h"
#include "runtime/size_expr.h"

namespace tilec::rt {

struct OpSize {
  std::string name;
  SizeExpr default_value; // empty: the caller or a tensor must give it
  bool key = true;
  // The tuning key's field for it when that differs from `name` (a size that shares its
  // --shape name with a tensor: paged attention's `has_sinks` is the key's `sinks`).
  std::string key_name = {};
  const std::string& key_field() const { return key_name.empty() ? name : key_name; }
  bool operator==(const OpSize&) const = default;
};

struct OpLet {
  std::string name;
  SizeExpr value;
  bool operator==(const OpLet&) const = default;
};

struct OpTensor {
  std::string name;
  bool output = false; // written into an array a binding may allocate
  bool inout = false;  // read and written in place: always the caller's array (output is false)
  std::vector<SizeExpr> dims;
  SizeExpr dtype;
  std::vector<ScalarType> accept;
  SizeExpr when; // empty: always
  bool operator==(const OpTensor&) const = default;
};

struct OpScalar {
  std::string name;
  ScalarType type = ScalarType::f32;
  SizeExpr when;
  bool operator==(const OpScalar&) const = default;
};

struct OpCheck {
  SizeExpr what;
  std::string message;
  bool operator==(const OpCheck&) const = default;
};

struct OpWorkspace {
  std::string name;
  ScalarType dtype = ScalarType::f32;
  SizeExpr elements;
  SizeExpr when;
  bool operator==(const OpWorkspace&) const = default;
};

struct OpLaunch {
  std::string kernel;
  std::array<SizeExpr, 3> grid;
  SizeExpr when;
  bool operator==(const OpLaunch&) const = default;
};

struct OpRun {
  std::vector<OpSize> sizes;
  std::vector<OpLet> lets;
  std::vector<OpTensor> tensors;
  std::vector<OpScalar> scalars;
  std::vector<OpCheck> checks;
  std::vector<OpWorkspace> workspace;
  std::vector<std::pair<std::string, SizeExpr>> spec;
  std::vector<OpLaunch> launches;
  bool operator==(const OpRun&) const = default;
};

// Reads the [run] table of TOML text (a kernel card, or what a template declares); nullopt when
// there is none. ManifestError naming `source`, the line:column and the key, an expression that
// does not parse included.
std::optional<OpRun> parse_op_run(std::string_view text, const std::string& source);
// The [run] table as TOML text, which read_op_run reads back.
std::string format_op_run(const OpRun& run);

// The workspace offset alignment (bytes): every buffer carved from a workspace starts at one.
inline constexpr std::size_t kWorkspaceAlign = 256;

// A run declared in code, the one statement of it a template makes (paged attention's:
// templates/attention/run_description.cpp): the kernel card's [run] table is written from it
// and the template's own C++ launches evaluate its grids, workspace and specialization
// (RunValues), so the two cannot say different things. Each expression is parsed as it is
// added; a malformed one, or a name declared twice, is an ExprError naming the op, what the
// expression is and its text. finish() puts the specialization in name order (as a [run.spec]
// table reads back) and refuses a run without a launch.
class OpRunBuilder {
public:
  struct Size {
    std::string_view default_value = {}; // empty: given by the caller or implied by a tensor
    bool key = true;                     // part of the tuning key
    std::string_view key_name = {};      // ... under this name (default: its own)
  };
  struct Tensor {
    std::vector<std::string_view> dims;
    std::string_view dtype;              // an expression naming the element type
    std::string_view when = {};
    std::vector<ScalarType> accept = {};
  };

  explicit OpRunBuilder(std::string op) : op_(std::move(op)) {}
  OpRunBuilder& size(const std::string& name, const Size& s);
  OpRunBuilder& size(const std::string& name); // given by the caller or implied by a tensor; in the key
  OpRunBuilder& let(const std::string& name, std::string_view value);
  OpRunBuilder& input(const std::string& name, const Tensor& t) { return tensor(name, t, false, false); }
  OpRunBuilder& output(const std::string& name, const Tensor& t) { return tensor(name, t, true, false); }
  OpRunBuilder& inout(const std::string& name, const Tensor& t) { return tensor(name, t, false, true); }
  OpRunBuilder& scalar(const std::string& name, std::string_view when = {}, ScalarType type = ScalarType::f32);
  OpRunBuilder& check(std::string_view what, const std::string& message);
  OpRunBuilder& workspace(const std::string& name, ScalarType dtype, std::string_view elements,
                          std::string_view when = {});
  OpRunBuilder& spec(const std::string& name, std::string_view value);
  OpRunBuilder& launch(const std::string& kernel, const std::array<std::string_view, 3>& grid,
                       std::string_view when = {});
  OpRun finish();

private:
  OpRunBuilder& tensor(const std::string& name, const Tensor& t, bool output, bool inout);
  SizeExpr parse(const std::string& what, std::string_view text) const;
  void declare(const std::string& name);
  std::string op_;
  OpRun run_;
  std::vector<std::string> names_; // one namespace, as in a [run] table
};

// A run's values for one problem, as a host's run computes them but from sizes given by name
// (what the template's C++ side knows) instead of tensors: the sizes in order (given, else
// their default), the config's values, then the lets in order. `present` names the optional
// tensors and scalars given (present(x)). ExprError naming the size, let or expression that
// cannot be evaluated.
class RunValues {
public:
  RunValues(const OpRun& run, const std::map<std::string, SpecValue>& sizes, std::set<std::string> present,
            const std::map<std::string, std::int64_t>& config);
  SpecValue eval(const SizeExpr& e, std::string_view what) const;
  std::int64_t eval_int(const SizeExpr& e, std::string_view what) const;
  // An empty `when` is always.
  bool wanted(const SizeExpr& when, std::string_view what) const { return when.empty() || eval_int(when, what) != 0; }
  // The launch of `kernel` (ExprError when the run has none), whether it runs, and its grid.
  const OpLaunch& launch(std::string_view kernel) const;
  bool launched(std::string_view kernel) const;
  std::array<std::int64_t, 3> grid(std::string_view kernel) const;
  // The elements of workspace buffer `name`, 0 when its `when` is 0.
  std::int64_t workspace_elements(std::string_view name) const;
  // What the run's modules are looked up with.
  std::map<std::string, SpecValue> spec() const;
  // The integer value of a size, config value or let.
  std::int64_t value_int(const std::string& name) const;
  const std::map<std::string, SpecValue>& values() const { return values_; }

private:
  const OpRun& run_;
  std::map<std::string, SpecValue> values_;
  std::set<std::string> present_;
  ExprLookup lookup_;
};

} // namespace tilec::rt
