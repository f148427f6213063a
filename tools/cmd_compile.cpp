#include <fmt/format.h>

#include <iostream>

#include "codegen/compile.h"
#include "codegen/module.h"
#include "ir/verifier.h"
#include "tools/commands.h"
#include "tools/json.h"
#include "tools/kernel_args.h"

namespace tilec::cli {

namespace {

struct CompileArgs {
  KernelChoice choice;
  std::string arch = "sm_90";
  std::string target = "nvptx";
  std::string out_dir;
};

} // namespace

codegen::CompileOptions compile_options(const templates::ParamMap& params, const std::string& arch,
                                        const std::string& target) {
  codegen::CompileOptions o;
  o.arch = arch;
  o.target = target == "emu" ? codegen::Target::emu : codegen::Target::nvptx;
  if (auto it = params.find("num_warps"); it != params.end()) {
    if (!ir::is_pow2(it->second) || it->second > 32)
      throw UserError(fmt::format("--set num_warps={}: must be a power of two from 1 to 32", it->second));
    o.num_warps = static_cast<int>(it->second);
  }
  return o;
}

Action add_compile(CLI::App& app, Common& common) {
  auto a = std::make_shared<CompileArgs>();
  a->choice.add_options(app);
  app.add_option("--arch", a->arch, "GPU architecture")->check(CLI::IsMember({"sm_80", "sm_90"}))->capture_default_str();
  app.add_option("--target", a->target, "nvptx (PTX + cubin) or emu (a host library for the emulator)")
      ->check(CLI::IsMember({"nvptx", "emu"}))
      ->capture_default_str();
  app.add_option("-o,--out", a->out_dir, "output folder")->required();
  return [&common, a] {
    const auto& t = a->choice.kernel();
    auto params = a->choice.params();
    auto shape = a->choice.shape();
    ir::Kernel k = t.build(params, shape);
    ir::verify(*k);
    codegen::CompileOptions opts = compile_options(params, a->arch, a->target);
    bool have_ptxas = opts.target == codegen::Target::nvptx && codegen::find_ptxas().has_value();
    codegen::CompiledKernel ck = codegen::compile(*k, opts);
    std::map<std::string, rt::SpecValue> spec;
    for (auto& [name, v] : params) spec[name] = v;
    for (auto& [name, v] : shape) spec[name] = v;
    rt::Manifest m = codegen::write_module(*k, ck, opts, spec, a->out_dir, t.name);
    auto path = [&](const std::filesystem::path& f) -> std::optional<std::string> {
      if (f.empty()) return std::nullopt;
      return (std::filesystem::path(a->out_dir) / f).string();
    };
    std::string manifest = (std::filesystem::path(a->out_dir) / (t.name + ".toml")).string();
    say(common, fmt::format("{} -> {} ({} threads, {} B shared) in {:.1f} ms", t.name, manifest,
                            ck.threads_per_block, ck.shared_bytes, ck.compile_ms));
    if (ck.ptxas)
      say(common, fmt::format("  ptxas: {} registers, {} B spill stores, {} B spill loads", ck.ptxas->registers,
                              ck.ptxas->spill_stores, ck.ptxas->spill_loads));
    else if (opts.target == codegen::Target::nvptx && !have_ptxas)
      say(common, "  ptxas not found (PATH, /usr/local/cuda/bin): wrote PTX only");
    if (common.json) {
      JsonObject j;
      j.str("kernel", t.name).str("arch", m.arch).number("compile_ms", ck.compile_ms);
      auto opt_str = [&](const char* key, std::optional<std::string> v) {
        if (v) j.str(key, *v);
        else j.null(key);
      };
      opt_str("ptx", path(m.ptx));
      opt_str("cubin", path(m.cubin));
      opt_str("library", path(m.emulator));
      j.str("manifest", manifest);
      if (ck.ptxas) {
        j.integer("registers", ck.ptxas->registers).integer("spills", ck.ptxas->spill_stores + ck.ptxas->spill_loads);
      } else {
        j.null("registers").null("spills");
      }
      j.integer("shared_bytes", ck.shared_bytes);
      std::cout << j.str() << std::endl;
    }
    return kOk;
  };
}

} // namespace tilec::cli
