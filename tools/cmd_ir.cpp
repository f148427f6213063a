#include <iostream>

#include "ir/printer.h"
#include "ir/verifier.h"
#include "tools/commands.h"
#include "tools/json.h"
#include "tools/kernel_args.h"

namespace tilec::cli {

Action add_ir(CLI::App& app, Common& common) {
  auto choice = std::make_shared<KernelChoice>();
  auto stage = std::make_shared<std::string>("tile");
  choice->add_options(app);
  app.add_option("--stage", *stage, "tile: the tile IR")->check(CLI::IsMember({"tile"}));
  return [&common, choice, stage] {
    const auto& t = choice->kernel();
    ir::Kernel k = t.build(choice->params(), choice->shape());
    ir::verify(*k);
    std::string text = ir::print(*k);
    if (common.json)
      std::cout << JsonObject().str("kernel", t.name).str("stage", *stage).str("text", text).str() << std::endl;
    else
      std::cout << text;
    return kOk;
  };
}

} // namespace tilec::cli
