#include <iostream>

#include "codegen/compile.h"
#include "codegen/layout_print.h"
#include "codegen/tma.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "backends/module_builder.h"
#include "tools/commands.h"
#include "tools/json.h"
#include "tools/kernel_args.h"

namespace tilec::cli {

Action add_ir(CLI::App& app, Common& common) {
  auto choice = std::make_shared<KernelChoice>();
  auto stage = std::make_shared<std::string>("tile");
  auto arch = std::make_shared<std::string>("sm_90");
  choice->add_options(app);
  app.add_option("--stage", *stage,
                 "tile: the tile IR; layouts: the tile IR with the layout of every value and the layout "
                 "conversions the lowering inserts, then the asynchronous copies and software pipelines; "
                 "llvm: optimized LLVM IR (nvptx); ptx: PTX")
      ->check(CLI::IsMember({"tile", "layouts", "llvm", "ptx"}))
      ->capture_default_str();
  app.add_option("--arch", *arch, "GPU architecture for the llvm and ptx stages")
      ->check(CLI::IsMember({"sm_80", "sm_90"}))
      ->capture_default_str();
  return [&common, choice, stage, arch] {
    const auto& t = choice->kernel();
    auto params = choice->params();
    ir::Kernel k = t.build(params, choice->shape());
    ir::verify(*k);
    std::string text;
    int layouts = -1, conversions = -1;
    if (*stage == "tile") {
      text = ir::print(*k);
    } else if (*stage == "layouts") {
      codegen::CompileOptions opts = backends::compile_options(params, *arch, "nvptx");
      // The kernel as the lowering plans it: descriptor ops expanded but TMA's loads.
      if (ir::Kernel prepared = codegen::prepare_descriptors(*k, opts)) k = prepared;
      codegen::LayoutsPrint p = codegen::print_layouts(*k, opts.num_warps, codegen::wgmma_enabled(opts));
      text = p.text;
      // The pipeline plan after the layouts, when a loop asks for stages or a dot copies an
      // operand by cp.async.
      if (std::string pipes = codegen::print_pipelines(*k, opts); !pipes.empty()) text += "\n" + pipes;
      layouts = p.layouts;
      conversions = p.conversions;
    } else {
      codegen::CompileOptions opts = backends::compile_options(params, *arch, "nvptx");
      text = codegen::lower_to_llvm(*k, opts).llvm_ir;
      if (*stage == "ptx") text = codegen::emit_ptx(text, opts);
    }
    if (common.json) {
      JsonObject j;
      j.str("kernel", t.name).str("stage", *stage).str("text", text);
      if (layouts >= 0) j.integer("layouts", layouts).integer("conversions", conversions);
      std::cout << j.str() << std::endl;
    } else
      std::cout << text;
    return kOk;
  };
}

} // namespace tilec::cli
