#include <iostream>

#include "codegen/compile.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "tools/commands.h"
#include "tools/json.h"
#include "tools/kernel_args.h"

namespace tilec::cli {

Action add_ir(CLI::App& app, Common& common) {
  auto choice = std::make_shared<KernelChoice>();
  auto stage = std::make_shared<std::string>("tile");
  auto arch = std::make_shared<std::string>("sm_90");
  choice->add_options(app);
  app.add_option("--stage", *stage, "tile: the tile IR; llvm: optimized LLVM IR (nvptx); ptx: PTX")
      ->check(CLI::IsMember({"tile", "llvm", "ptx"}))
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
    if (*stage == "tile") {
      text = ir::print(*k);
    } else {
      codegen::CompileOptions opts = compile_options(params, *arch, "nvptx");
      text = codegen::lower_to_llvm(*k, opts).llvm_ir;
      if (*stage == "ptx") text = codegen::emit_ptx(text, opts);
    }
    if (common.json)
      std::cout << JsonObject().str("kernel", t.name).str("stage", *stage).str("text", text).str() << std::endl;
    else
      std::cout << text;
    return kOk;
  };
}

} // namespace tilec::cli
