#include "backends/module_builder.h"

#include <fmt/format.h>

#include "codegen/compile.h"
#include "codegen/module.h"
#include "ir/error.h"

namespace tilec::backends {

using templates::KernelTemplate;
using templates::ParamMap;
using templates::Param;
using templates::all_templates;

namespace fs = std::filesystem;

codegen::CompileOptions compile_options(const ParamMap& params, const std::string& arch, const std::string& target) {
  codegen::CompileOptions o;
  o.target = arch == "host" || target == "emu" ? codegen::Target::emu
             : target == "emu-nvptx"           ? codegen::Target::emu_nvptx
                                               : codegen::Target::nvptx;
  if (arch != "host") o.arch = arch;
  // num_warps was checked with the other --set values; compile() checks it again.
  if (auto it = params.find("num_warps"); it != params.end()) o.num_warps = int(it->second);
  // The tools and the module builder keep neither the LLVM IR text nor its verification (a
  // tenth and a fiftieth of a paged-attention compile); tests calling codegen::compile
  // directly keep both.
  o.llvm_ir_text = false;
  o.verify_llvm = false;
  return o;
}

namespace {

rt::Manifest write_one(const ir::Function& fn, const codegen::CompileOptions& opts,
                       const std::map<std::string, rt::SpecValue>& spec, const fs::path& dir,
                       const std::string& name, const std::vector<std::string>& run,
                       const rt::ProblemKey& problem = {}) {
  codegen::CompiledKernel ck = codegen::compile(fn, opts);
  return codegen::write_module(fn, ck, opts, spec, dir, name, run, problem);
}

// The kernel names of one run, in launch order: what each module's manifest records as `run`.
std::vector<std::string> run_of(const std::vector<ir::Kernel>& ks) {
  std::vector<std::string> names;
  for (const ir::Kernel& k : ks) names.push_back(k->name);
  return names;
}

// `<kernel>-<hash>-<arch>`, the hash over the IR and the specialization: one IR can serve
// several specializations (the combine kernel does not depend on softcap), and each needs a
// manifest of its own.
std::string module_name(const ir::Function& fn, const std::map<std::string, rt::SpecValue>& spec,
                        const std::string& arch) {
  std::string text = codegen::ir_hash(fn);
  for (const auto& [k, v] : spec)
    text += fmt::format(" {}={}", k, std::holds_alternative<int64_t>(v) ? std::to_string(std::get<int64_t>(v))
                                                                        : std::get<std::string>(v));
  std::string sum = rt::file_checksum(text); // "<bytes>:<hash>"
  return fmt::format("{}-{}-{}", fn.name, sum.substr(sum.find(':') + 1), arch);
}

// The template whose runs launch `kernel`: the one of that name, else the longest whose
// name prefixes it (paged_attention makes paged_attention_combine).
const KernelTemplate* template_for(const std::string& kernel) {
  const KernelTemplate* best = nullptr;
  for (const KernelTemplate& t : all_templates())
    if (kernel.rfind(t.name, 0) == 0 && (!best || t.name.size() > best->name.size())) best = &t;
  return best;
}

// Template parameter values from a query's values: declared names (choices by name), the
// declared default where the query has none.
ParamMap values_for(const std::vector<Param>& declared, const rt::Spec& values, const std::string& kernel) {
  ParamMap out;
  for (const Param& p : declared) {
    auto it = values.find(p.name);
    if (it == values.end()) {
      out[p.name] = p.value;
    } else if (auto* i = std::get_if<int64_t>(&it->second)) {
      out[p.name] = *i;
    } else {
      const std::string& s = std::get<std::string>(it->second);
      auto c = std::find(p.choices.begin(), p.choices.end(), s);
      if (c == p.choices.end())
        throw UserError(fmt::format("module {}: {}={} is not one of its values", kernel, p.name, s));
      out[p.name] = c - p.choices.begin();
    }
  }
  return out;
}

} // namespace

std::vector<rt::Manifest> write_template_modules(const KernelTemplate& t, const ParamMap& params,
                                                 const ParamMap& shape, const std::string& arch,
                                                 const fs::path& dir, bool unique_names) {
  codegen::CompileOptions opts = compile_options(params, arch);
  auto spec = templates::module_spec(t, params, shape);
  std::vector<rt::Manifest> out;
  std::vector<ir::Kernel> ks = templates::build_kernels(t, params, shape);
  for (const ir::Kernel& k : ks) {
    opts.large_buffers = templates::large_buffers(t, params, shape, *k);
    out.push_back(write_one(*k, opts, spec, dir, unique_names ? module_name(*k, spec, arch) : k->name, run_of(ks),
                            templates::problem_key(t, shape)));
  }
  return out;
}

rt::Manifest build_module(const rt::ModuleQuery& q, const std::vector<fs::path>& dirs) {
  const KernelTemplate* t = template_for(q.kernel);
  if (!t) throw rt::ModuleNotFound(fmt::format("no tilec template builds kernel '{}'", q.kernel));
  ParamMap params = values_for(t->params, q.values, q.kernel);
  ParamMap shape = values_for(t->shape, q.values, q.kernel);
  // Values that specialize a kernel without being --shape sizes (paged attention's softcap).
  for (const auto& [name, v] : q.values)
    if (auto* i = std::get_if<int64_t>(&v); i && !params.count(name) && !shape.count(name)) shape[name] = *i;

  std::vector<ir::Kernel> ks = templates::build_kernels(*t, params, shape);
  for (const ir::Kernel& k : ks) {
    if (k->name != q.kernel) continue;
    rt::ModuleQuery exact = q;
    exact.ir_hash = codegen::ir_hash(*k);
    std::vector<fs::path> where = dirs;
    where.push_back(rt::cache_module_dir());
    if (auto m = rt::find_module(where, exact)) return *m;
    auto spec = templates::module_spec(*t, params, shape);
    codegen::CompileOptions opts = compile_options(params, q.arch);
    opts.large_buffers = templates::large_buffers(*t, params, shape, *k);
    return write_one(*k, opts, spec, rt::cache_module_dir(), module_name(*k, spec, q.arch),
                     run_of(ks));
  }
  throw rt::ModuleNotFound(fmt::format("template {} does not launch kernel '{}' for {}", t->name, q.kernel,
                                       rt::describe(q)));
}

void enable_module_builder() {
  rt::set_module_builder(build_module);
  rt::set_kernel_card_provider([](const std::string& kernel) -> std::optional<rt::KernelCard> {
    if (const KernelTemplate* t = templates::find_template(kernel)) return templates::kernel_card(*t);
    return std::nullopt;
  });
}

} // namespace tilec::backends
