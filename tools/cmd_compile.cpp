#include <fmt/format.h>

#include <chrono>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <unistd.h>

#include "codegen/compile.h"
#include "codegen/ptx_loops.h"
#include "codegen/module.h"
#include "ir/verifier.h"
#include "backends/module_builder.h"
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
  bool no_tensor_cores = false;
  bool no_wgmma = false;
  bool no_tma = false;
  bool stock_o3 = false;
  int max_registers = 0;
  bool no_device_asserts = false;
  std::vector<std::string> large_buffers;
};

// Rejects an output folder compile could not fill, before any work: nothing is created
// when the command fails. `files` are the names the module will have in it.
void check_out_dir(const std::filesystem::path& dir, const std::vector<std::string>& files) {
  namespace fs = std::filesystem;
  if (dir.empty()) throw UserError("--out: the folder name is empty");
  std::error_code ec;
  fs::path existing = dir;
  while (!fs::exists(existing, ec) && existing.has_relative_path() && existing != existing.parent_path())
    existing = existing.parent_path();
  if (existing.empty()) existing = ".";
  if (!fs::is_directory(existing, ec))
    throw UserError(fmt::format("--out {}: {} is not a folder", dir.string(), existing.string()));
  if (::access(existing.c_str(), W_OK | X_OK) != 0)
    throw UserError(fmt::format("--out {}: cannot write in {}: {}", dir.string(), existing.string(),
                                std::strerror(errno)));
  if (existing != dir) return; // to be created: nothing in it yet
  for (const std::string& f : files)
    if (fs::is_directory(dir / f, ec))
      throw UserError(fmt::format("--out {}: {} is a folder, not a module file", dir.string(), f));
}

void add_compile_options(CLI::App& app, CompileArgs& a) {
  a.choice.add_options(app);
  app.add_option("--arch", a.arch, "GPU architecture")->check(CLI::IsMember({"sm_80", "sm_90"}))->capture_default_str();
  app.add_option("--target", a.target,
                 "nvptx (PTX + cubin), emu (a host library for the emulator) or emu-nvptx (a host library for "
                 "the emulator built from the GPU's nvptx lowering)")
      ->check(CLI::IsMember({"nvptx", "emu", "emu-nvptx"}))
      ->capture_default_str();
  app.add_option("-o,--out", a.out_dir, "output folder")->required();
  app.add_flag("--stock-o3", a.stock_o3,
               "optimize GPU code with LLVM's stock O3 pipeline instead of tilec's own, to compare");
  app.add_flag("--no-tensor-cores", a.no_tensor_cores,
               "run every dot on CUDA cores (f16/bf16 dots take mma.sync by default), to compare");
  app.add_flag("--no-wgmma", a.no_wgmma,
               "on sm_90, keep every tensor-core dot on mma.sync (those that fit a warpgroup take wgmma.mma_async "
               "and the module targets sm_90a by default), to compare");
  app.add_flag("--no-tma", a.no_tma,
               "on sm_90, copy tensor descriptor loads with cp.async (a wgmma operand's descriptor load is a TMA "
               "copy, cp.async.bulk.tensor, by default), to compare");
  app.add_flag("--no-device-asserts", a.no_device_asserts, "compile device_assert checks out");
  app.add_option("--max-registers", a.max_registers,
                 "registers per thread the GPU code may use, 24 to 255, in place of the kernel's own asks "
                 "(min_blocks_per_sm, max_registers; as Triton's maxnreg), to compare")
      ->check(CLI::Range(ir::Function::kMinRegisters, ir::Function::kMaxRegisters));
  app.add_option("--large-buffers", a.large_buffers,
                 "pointer parameters whose buffers may pass 2^31 elements: 64-bit offsets into them (the "
                 "kernel's own sizes add theirs)")
      ->delimiter(',');
}

// One compile: the template's kernels (the one the module is named after first, then those
// launched after it, a combine step), built and verified, and the options the flags ask for.
struct CompileJob {
  const templates::KernelTemplate& t;
  templates::ParamMap params, shape;
  std::vector<ir::Kernel> kernels;
  double build_ms = 0;
  codegen::CompileOptions opts;
  std::vector<std::string> large_buffers; // --large-buffers

  const ir::Kernel& first() const { return kernels.front(); }
  // `opts` with 64-bit offsets for the buffers named and those the sizes make large, kernel by kernel.
  codegen::CompileOptions options_for(const ir::Function& fn) const {
    codegen::CompileOptions o = opts;
    o.large_buffers = templates::large_buffers(t, params, shape, fn);
    for (const std::string& name : large_buffers)
      for (const ir::Value* p : fn.params)
        if (p->name == name && p->type.is_ptr()) o.large_buffers.insert(name);
    return o;
  }
};

CompileJob build_job(const CompileArgs& a) {
  CompileJob job{a.choice.kernel(), a.choice.params(), a.choice.shape(), {}, 0, {}, a.large_buffers};
  auto t_build = std::chrono::steady_clock::now();
  job.kernels = templates::build_kernels(job.t, job.params, job.shape);
  job.build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_build).count();
  for (const ir::Kernel& each : job.kernels) ir::verify(*each);
  job.opts = backends::compile_options(job.params, a.arch, a.target);
  job.opts.tensor_cores = !a.no_tensor_cores;
  job.opts.wgmma = !a.no_wgmma;
  job.opts.tma = !a.no_tma;
  job.opts.stock_o3 = a.stock_o3;
  job.opts.max_registers = a.max_registers;
  job.opts.device_asserts = !a.no_device_asserts;
  return job;
}

// Each --large-buffers name must be a pointer parameter of one of the kernels.
void check_large_buffer_names(const CompileJob& job) {
  for (const std::string& name : job.large_buffers) {
    bool found = false;
    for (const ir::Kernel& each : job.kernels)
      for (const ir::Value* p : each->params) found |= p->name == name && p->type.is_ptr();
    if (!found)
      throw UserError(fmt::format("--large-buffers {}: {} has no pointer parameter of that name", name, job.t.name));
  }
}

// Writes the kernel card (what a host needs to select and load the module), the first
// kernel's module (`ck`) and each later kernel's, compiled here; returns the first's manifest.
rt::Manifest write_modules(const Common& common, const CompileJob& job, const codegen::CompiledKernel& ck,
                           const std::string& out_dir) {
  const auto& t = job.t;
  // What the module is specialized on, as rt::find_module matches it.
  std::map<std::string, rt::SpecValue> spec = templates::module_spec(t, job.params, job.shape);
  rt::KernelCard card = templates::kernel_card(t);
  card.compiler = program_name();
  rt::write_kernel_card(card, out_dir);
  std::vector<std::string> run;
  for (const ir::Kernel& each : job.kernels) run.push_back(each->name);
  rt::ProblemKey problem = templates::problem_key(t, job.shape);
  const ir::Function& k = *job.first();
  rt::Manifest m = codegen::write_module(k, ck, job.options_for(k), spec, out_dir, t.name, run, problem);
  for (size_t i = 1; i < job.kernels.size(); ++i) { // kernels launched after it (a combine step)
    const ir::Function& c = *job.kernels[i];
    codegen::write_module(c, codegen::compile(c, job.options_for(c)), job.options_for(c), spec, out_dir, c.name, run,
                          problem);
    say(common, fmt::format("{} -> {}", c.name, (std::filesystem::path(out_dir) / (c.name + ".toml")).string()));
  }
  return m;
}

// The register ceiling the PTX gives ptxas (.maxnreg), which its count follows; 0 for none.
int register_ceiling(const std::string& ptx) {
  if (size_t at = ptx.find(".maxnreg "); at != std::string::npos) return std::atoi(ptx.c_str() + at + 9);
  return 0;
}

// What was written and what the first kernel's code holds, a line each.
void say_summary(const Common& common, const CompileJob& job, const codegen::CompiledKernel& ck,
                 const std::string& manifest, bool have_ptxas, const codegen::PtxLoop* main_loop,
                 const codegen::PtxLoop* producer_loop) {
  say(common, fmt::format("{} -> {} ({} threads, {} B shared) in {:.1f} ms", job.t.name, manifest,
                          ck.threads_per_block, ck.shared_bytes, ck.compile_ms));
  say(common, fmt::format("  phases: build {:.1f} ms, lower {:.1f}, optimize {:.1f}, codegen {:.1f}, ptxas {:.1f}",
                          job.build_ms, ck.phases.lower_ms, ck.phases.optimize_ms, ck.phases.codegen_ms,
                          ck.phases.ptxas_ms));
  if (ck.ptxas)
    say(common, fmt::format("  ptxas: {} registers (at most {}), {} B spill stores, {} B spill loads",
                            ck.ptxas->registers, register_ceiling(ck.ptx), ck.ptxas->spill_stores, ck.ptxas->spill_loads));
  else if (job.opts.target == codegen::Target::nvptx && !have_ptxas)
    say(common, "  ptxas not found (PATH, /usr/local/cuda/bin): wrote PTX only");
  if (ck.stats.wgmma_dots)
    say(common, fmt::format("  tensor cores: {} dot{} on warpgroup MMAs (wgmma.mma_async; code for {}a){}",
                            ck.stats.wgmma_dots, ck.stats.wgmma_dots == 1 ? "" : "s", job.opts.arch,
                            ck.stats.wgmma_register_a
                                ? fmt::format(", {} with A from registers", ck.stats.wgmma_register_a)
                                : std::string()));
  if (ck.stats.tma_loads)
    say(common, fmt::format("  TMA: {} descriptor load{} copied by cp.async.bulk.tensor, {} tensor map{} built at launch",
                            ck.stats.tma_loads, ck.stats.tma_loads == 1 ? "" : "s", ck.stats.tensor_maps.size(),
                            ck.stats.tensor_maps.size() == 1 ? "" : "s"));
  if (ck.stats.shared_accesses)
    say(common, fmt::format("  shared memory: {} loads and stores per thread ({} vectors), {} B", ck.stats.shared_accesses,
                            ck.stats.shared_vector_accesses, ck.stats.shared_access_bytes));
  if (ck.stats.pipelined_loops)
    say(common, fmt::format("  pipeline: {} stages x {} B of copies in flight{}", ck.stats.pipeline_stages,
                            ck.stats.pipeline_stage_bytes,
                            ck.stats.pipeline_late_bytes
                                ? fmt::format(", and {} B single-buffered (late slots)", ck.stats.pipeline_late_bytes)
                                : std::string()));
  else if (ck.stats.staged_loops)
    say(common, "  pipeline: not applied (no loop has a tensor-core operand loaded in 16-byte chunks from a "
                "buffer the kernel only reads)");
  if (!ck.ptx.empty()) {
    if (const codegen::PtxLoop* l = main_loop)
      say(common, fmt::format("  main loop: {} PTX instructions per trip ({} mma, {} cp.async, {}{} global loads{})",
                              l->instructions, l->count("mma") + l->count("wgmma.mma_async"), (l->count("cp.async.cg") + l->count("cp.async.ca")),
                              l->count("cp.async.bulk") ? fmt::format("{} TMA copies, ", l->count("cp.async.bulk")) : "", l->count("ld.global"),
                              l->inner_loops ? fmt::format(", {} inner loops counted once", l->inner_loops) : ""));
    if (const codegen::PtxLoop* p = producer_loop)
      say(common, fmt::format("  producer loop: {} PTX instructions per trip, {} TMA copies", p->instructions,
                              p->count("cp.async.bulk")));
  }
}

// The same as one JSON object (--json).
void print_json(const CompileJob& job, const codegen::CompiledKernel& ck, const rt::Manifest& m,
                const std::string& out_dir, const std::string& manifest, const codegen::PtxLoop* main_loop,
                const codegen::PtxLoop* producer_loop) {
  auto path = [&](const std::filesystem::path& f) -> std::optional<std::string> {
    if (f.empty()) return std::nullopt;
    return (std::filesystem::path(out_dir) / f).string();
  };
  JsonObject j;
  j.str("kernel", job.t.name).str("arch", m.arch).number("compile_ms", ck.compile_ms);
  // Phases of the first kernel's compile: the DSL build (with the tile-IR passes), the
  // lowering, LLVM's optimizations, code generation and ptxas (0 when it did not run).
  j.number("build_ms", job.build_ms).number("lower_ms", ck.phases.lower_ms);
  j.number("optimize_ms", ck.phases.optimize_ms).number("codegen_ms", ck.phases.codegen_ms);
  j.number("ptxas_ms", ck.phases.ptxas_ms);
  j.number("wgmma_dots", ck.stats.wgmma_dots).number("wgmma_register_a", ck.stats.wgmma_register_a);
  j.number("tma_loads", ck.stats.tma_loads);
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
  if (int ceiling = register_ceiling(ck.ptx)) j.integer("register_ceiling", ceiling);
  else j.null("register_ceiling");
  j.integer("shared_bytes", ck.shared_bytes);
  j.integer("pipeline_stages", ck.stats.pipelined_loops ? ck.stats.pipeline_stages : 1);
  j.integer("pipeline_stage_bytes", ck.stats.pipeline_stage_bytes);
  j.integer("pipeline_late_bytes", ck.stats.pipeline_late_bytes);
  // Shared-memory loads and stores as the lowering emits them (per thread, before LLVM).
  j.integer("shared_accesses", ck.stats.shared_accesses).integer("shared_vector_accesses", ck.stats.shared_vector_accesses);
  j.integer("shared_access_bytes", ck.stats.shared_access_bytes);
  // The main loop (the outermost one loading from global memory; a warp-specialized kernel's
  // consumer loop, issuing the MMAs): instructions per trip.
  if (const codegen::PtxLoop* l = main_loop) {
    j.integer("loop_instructions", l->instructions).integer("loop_inner_loops", l->inner_loops);
    j.integer("loop_mma", l->count("mma")).integer("loop_wgmma", l->count("wgmma.mma_async"));
    j.integer("loop_cp_async", (l->count("cp.async.cg") + l->count("cp.async.ca")));
  } else {
    j.null("loop_instructions").null("loop_inner_loops").null("loop_mma").null("loop_wgmma").null("loop_cp_async");
  }
  // A warp-specialized kernel's producer loop (its TMA copies), null for any other kernel.
  if (const codegen::PtxLoop* p = producer_loop) {
    j.integer("producer_loop_instructions", p->instructions).integer("producer_loop_tma", p->count("cp.async.bulk"));
  } else {
    j.null("producer_loop_instructions").null("producer_loop_tma");
  }
  std::cout << j.str() << std::endl;
}

} // namespace

Action add_compile(CLI::App& app, Common& common) {
  auto a = std::make_shared<CompileArgs>();
  add_compile_options(app, *a);
  return [&common, a] {
    const CompileJob job = build_job(*a);
    const std::string& name = job.t.name;
    check_out_dir(a->out_dir, {name + ".toml", name + ".ptx", name + ".cubin", name + ".so"});
    bool have_ptxas = job.opts.target == codegen::Target::nvptx && codegen::find_ptxas().has_value();
    check_large_buffer_names(job);
    const ir::Function& k = *job.first();
    codegen::CompiledKernel ck = codegen::compile(k, job.options_for(k));
    rt::Manifest m = write_modules(common, job, ck, a->out_dir);
    std::string manifest = (std::filesystem::path(a->out_dir) / (name + ".toml")).string();
    // One of the kernel's own loops (not libdevice's sin/cos range reduction).
    const std::optional<codegen::PtxLoop> main_loop = codegen::kernel_main_loop(k, ck.ptx);
    const std::optional<codegen::PtxLoop> producer_loop = codegen::kernel_producer_loop(k, ck.ptx);
    const codegen::PtxLoop* main = main_loop ? &*main_loop : nullptr;
    const codegen::PtxLoop* producer = producer_loop ? &*producer_loop : nullptr;
    say_summary(common, job, ck, manifest, have_ptxas, main, producer);
    if (common.json) print_json(job, ck, m, a->out_dir, manifest, main, producer);
    return kOk;
  };
}

} // namespace tilec::cli
