#pragma once
// How every launcher words an argument that does not fit its kernel's parameters: the
// interpreter (interp/), the launchers over compiled code (launch/module_launcher.h,
// backends/launchers.h) and the runtime's check against a manifest (runtime/launch.h). One
// mistake reads the same on every backend:
//
//   parameter 'x' (ptr<f16>) was given buffer 'xs' of f32
//   expects 4 arguments, got 3: missing parameter 'n' (i32)
#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <string_view>

namespace tilec::rt {

// A kernel parameter as the messages name it: "x" and its type, "ptr<f16>".
struct ParamName {
  std::string name;
  std::string type;
};

// "parameter 'x' (ptr<f16>)".
std::string param_phrase(std::string_view name, std::string_view type);
// "parameter 'x' (ptr<f16>) was given <given>".
std::string param_given(std::string_view name, std::string_view type, std::string_view given);
// A buffer argument as param_given's `given`: "buffer 'xs' of f32", or "a buffer of f32"
// when it has no name.
std::string buffer_of(std::string_view buffer_name, std::string_view element);

// `given` arguments for the parameters `params` (a different count): "expects 4 arguments,
// got 3: missing parameter 'n' (i32)", "expects 4 arguments, got 2: missing parameters
// 'out' (ptr<f32>) and 'n' (i32)", "expects 1 argument, got 2: extra argument 2 (the
// integer 7)". `extra` describes the arguments past the last parameter, in order (those it
// lacks are named by position only).
//
// Which parameters are missing: with `fits` (whether argument j could be parameter i: a
// buffer of its element type for a pointer, a scalar for a scalar), the first parameters
// that, skipped, let the arguments fill the rest in order; so (x, out, n) for (x: ptr<f32>,
// y: ptr<i32>, out: ptr<f32>, n: i32) misses 'y'. Without `fits`, or when no such way
// exists, the last ones.
std::string argument_count_mismatch(std::span<const ParamName> params, std::size_t given,
                                    std::span<const std::string> extra = {},
                                    const std::function<bool(std::size_t param, std::size_t arg)>& fits = {});

} // namespace tilec::rt
