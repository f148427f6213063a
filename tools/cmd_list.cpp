#include <fmt/format.h>

#include <iostream>

#include "templates/registry.h"
#include "tools/commands.h"
#include "tools/json.h"

namespace tilec::cli {

namespace {

std::string params_json(const std::vector<templates::Param>& ps) {
  std::string out = "[";
  for (size_t i = 0; i < ps.size(); ++i) {
    JsonObject o;
    o.str("name", ps[i].name).str("help", ps[i].help);
    if (ps[i].choices.empty()) o.integer("default", ps[i].value);
    else o.str("default", ps[i].value_str());
    out += (i ? ", " : "") + o.str();
  }
  return out + "]";
}

} // namespace

Action add_list(CLI::App& app, Common& common) {
  return [&common] {
    std::string kernels = "[";
    bool first = true;
    for (const auto& t : templates::all_templates()) {
      say(common, fmt::format("{}  {}", t.name, t.summary));
      for (const auto& p : t.params)
        say(common, fmt::format("    --set   {:<16} {}", fmt::format("{}={}", p.name, p.value_str()), p.help));
      for (const auto& p : t.shape)
        say(common, fmt::format("    --shape {:<16} {}", fmt::format("{}={}", p.name, p.value_str()), p.help));
      std::string paths;
      for (size_t i = 0; i < t.paths.size(); ++i) {
        say(common, fmt::format("    --path  {:<16} {}{}", t.paths[i].name, t.paths[i].help, i ? "" : " (default)"));
        paths += fmt::format("{}\"{}\"", i ? ", " : "", json_escape(t.paths[i].name));
      }
      for (const auto& o : t.options) say(common, fmt::format("    --{:<22} {}", o.name + " X", o.help));
      if (templates::takes_inputs(t)) say(common, fmt::format("    --inputs DIR             {}", templates::inputs_help(t)));
      if (!t.make_problem) say(common, "    (no reference: it can be compiled, not run or tuned)");
      JsonObject o;
      o.str("name", t.name).str("summary", t.summary).raw("params", params_json(t.params)).raw("shape", params_json(t.shape));
      o.raw("paths", "[" + paths + "]").boolean("runnable", bool(t.make_problem));
      kernels += (first ? "" : ", ") + o.str();
      first = false;
    }
    if (common.json) std::cout << JsonObject().raw("kernels", kernels + "]").str() << std::endl;
    return kOk;
  };
}

void say(const Common& c, const std::string& line) {
  if (!c.json) std::cout << line << "\n";
}

} // namespace tilec::cli
