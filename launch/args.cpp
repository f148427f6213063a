#include "launch/args.h"

#include <fmt/format.h>

#include "abi/arg_errors.h"
#include "abi/error.h"
#include "ir/convert.h"

namespace tilec::launch {

using ir::Value;

std::string scalar_arg_error(DType t, const Arg& a) {
  if (is_float(t) && !a.is_float) return fmt::format("the integer {}, not a float (pass Arg::of_float)", a.i);
  if (!is_float(t) && a.is_float) return fmt::format("the float {}, not an integer (pass Arg::of_int)", a.f);
  return "";
}

namespace {

// An argument as a count mismatch names an extra one: "buffer 'xs' of f32", "the integer 7".
std::string describe_arg(const Arg& a) {
  if (a.buffer) return rt::buffer_of(a.buffer->name, dtype_name(a.buffer->dtype));
  return a.is_float ? fmt::format("the float {}", a.f) : fmt::format("the integer {}", a.i);
}

// The wording of abi/arg_errors.h, which every launcher shares.
std::string argument_count_error(const ir::Function& fn, const std::vector<Arg>& args) {
  std::vector<rt::ParamName> params;
  for (const Value* p : fn.params) params.push_back({p->name, p->type.str()});
  std::vector<std::string> extra;
  for (size_t k = fn.params.size(); k < args.size(); ++k) extra.push_back(describe_arg(args[k]));
  auto fits = [&](size_t i, size_t k) {
    const ir::Type& t = fn.params[i]->type;
    const Arg& a = args[k];
    if (t.is_ptr()) return a.buffer && a.buffer->dtype == t.dtype();
    return !a.buffer && a.is_float == is_float(t.dtype());
  };
  return rt::argument_count_mismatch(params, args.size(), extra, fits);
}

} // namespace

std::string argument_error(const ir::Function& fn, const std::vector<Arg>& args) {
  if (args.size() != fn.params.size()) return argument_count_error(fn, args);
  for (size_t k = 0; k < args.size(); ++k) {
    const Value* p = fn.params[k];
    const Arg& a = args[k];
    const std::string type = p->type.str();
    if (!p->type.is_scalar()) return rt::param_phrase(p->name, type) + " is a tile; parameters must be scalars or pointers";
    DType t = p->type.dtype();
    if (p->type.is_ptr()) {
      if (!a.buffer) return rt::param_given(p->name, type, "a scalar, not a buffer");
      if (a.buffer->dtype != t)
        return rt::param_given(p->name, type, rt::buffer_of(a.buffer->name, dtype_name(a.buffer->dtype)));
    } else if (a.buffer) {
      return rt::param_given(p->name, type, fmt::format("buffer '{}', not a scalar", a.buffer->name));
    } else if (std::string why = scalar_arg_error(t, a); !why.empty()) {
      return rt::param_given(p->name, type, why);
    } else if (!is_float(t)) {
      if (ir::wrap_int(a.i, t) != a.i)
        return rt::param_given(p->name, type, fmt::format("{}, which does not fit", a.i));
      if (p->multiple_of && a.i % p->multiple_of != 0)
        return rt::param_given(p->name, type,
                               fmt::format("{}, not a multiple of {} as the kernel declares (multiple_of)", a.i,
                                           p->multiple_of));
    }
  }
  return "";
}

void check_kernel_args(const ir::Function& fn, const std::vector<Arg>& args) {
  if (std::string why = argument_error(fn, args); !why.empty())
    throw UserError(fmt::format("kernel '{}': {}", fn.name, why));
}

} // namespace tilec::launch
