#include "measure/plan.h"

#include "abi/toml_reader.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "ir/error.h"
#include "runtime/module_store.h"

namespace tilec::measure {

namespace fs = std::filesystem;

namespace {

std::string quoted(const std::string& s) {
  std::ostringstream os;
  os << toml::value<std::string>(s);
  return os.str();
}

std::string inline_key(const rt::ProblemKey& key) {
  std::string out;
  for (const auto& [k, v] : key) {
    out += out.empty() ? "" : ", ";
    out += k + " = " + (std::holds_alternative<int64_t>(v) ? std::to_string(std::get<int64_t>(v))
                                                            : quoted(std::get<std::string>(v)));
  }
  return "{ " + out + " }";
}

std::string inline_config(const templates::ParamMap& config) {
  std::string out;
  for (const auto& [k, v] : config) out += fmt::format("{}{} = {}", out.empty() ? "" : ", ", k, v);
  return "{ " + out + " }";
}

// The plan's fields: its integers are counts, indices and seeds (at least 0 unless said).
class Reader : public TomlReader<PlanError> {
public:
  using TomlReader::TomlReader;
  int64_t integer(const toml::table& t, std::string_view key, int64_t least = 0) const {
    return TomlReader::integer(t, key, least);
  }
  templates::ParamMap config(const toml::table& t) const {
    templates::ParamMap out;
    for (const auto& [k, v] : table(t, "config")) {
      if (!v.is_integer()) fail(v, fmt::format("config value '{}' must be an integer", k.str()));
      out[std::string(k.str())] = v.as_integer()->get();
    }
    return out;
  }
  size_t problem(const toml::table& t, size_t problems) const {
    int64_t p = integer(t, "problem");
    if (size_t(p) >= problems) fail(*t.get("problem"), fmt::format("problem {} is not among the plan's {}", p, problems));
    return size_t(p);
  }
};

} // namespace

std::string format_plan(const Plan& plan) {
  std::string s = "# A tilec measurement plan: time it with tilec-measure (docs/AUTOTUNING.md, \"Compile here, measure there\").\n";
  s += fmt::format("version = 1\nkernel = {}\narch = {}\ncompiler = {}\ncreated_at = {}\nspace = {}\n",
                   quoted(plan.kernel), quoted(plan.arch), quoted(plan.compiler), quoted(plan.created_at),
                   quoted(plan.space));
  s += fmt::format("warmup = {}\nrepeats = {}\nproblems = {}\ncandidates = {}\n", plan.warmup, plan.repeats,
                   plan.problems.size(), plan.candidates.size());
  for (const PlanProblem& p : plan.problems)
    s += fmt::format("\n[[problem]]\nkey = {}\nseed = {}\n", inline_key(p.key), p.seed);
  for (const PlanCandidate& c : plan.candidates) {
    s += fmt::format("\n[[candidate]]\nproblem = {}\nindex = {}\nconfig = {}\nmodules = {}\n", c.problem, c.index,
                     inline_config(c.config), quoted(c.modules));
    if (c.registers) s += fmt::format("registers = {}\n", *c.registers);
    s += fmt::format("checked = {}\n", c.checked);
    if (c.max_abs_err) s += fmt::format("max_abs_err = {:.6g}\n", *c.max_abs_err);
  }
  for (const PlanRejected& r : plan.rejected)
    s += fmt::format("\n[[rejected]]\nproblem = {}\nconfig = {}\nreason = {}\n", r.problem, inline_config(r.config),
                     quoted(r.reason));
  return s;
}

Plan parse_plan(std::string_view text, const std::string& source) {
  toml::table doc = parse_toml<PlanError>(text, source);
  Reader r(source);
  Plan plan;
  if (int64_t v = r.integer(doc, "version"); v != 1)
    r.fail(*doc.get("version"), fmt::format("plan version {} is not one this tilec-measure reads (1)", v));
  plan.kernel = r.string(doc, "kernel");
  plan.arch = r.string(doc, "arch");
  plan.compiler = r.string(doc, "compiler");
  plan.created_at = r.string(doc, "created_at");
  plan.space = r.string(doc, "space");
  plan.warmup = int(r.integer(doc, "warmup"));
  plan.repeats = int(r.integer(doc, "repeats", 1));
  for (const toml::table* t : r.tables(doc, "problem")) {
    PlanProblem p;
    for (const auto& [k, v] : r.table(*t, "key")) {
      if (v.is_integer()) p.key[std::string(k.str())] = v.as_integer()->get();
      else if (v.is_string()) p.key[std::string(k.str())] = v.as_string()->get();
      else r.fail(v, fmt::format("key value '{}' must be an integer or a string", k.str()));
    }
    p.seed = uint64_t(r.integer(*t, "seed"));
    plan.problems.push_back(std::move(p));
  }
  for (const toml::table* t : r.tables(doc, "candidate")) {
    PlanCandidate c;
    c.problem = r.problem(*t, plan.problems.size());
    c.index = size_t(r.integer(*t, "index"));
    c.config = r.config(*t);
    c.modules = r.string(*t, "modules");
    if (c.modules.empty() || fs::path(c.modules).is_absolute() || c.modules.find("..") != std::string::npos)
      r.fail(*t->get("modules"), fmt::format("modules '{}' must be a folder inside the plan", c.modules));
    if (t->get("registers")) c.registers = int(r.integer(*t, "registers"));
    const toml::node& checked = r.need(*t, "checked");
    if (!checked.is_boolean()) r.fail(checked, "'checked' must be true or false");
    c.checked = checked.as_boolean()->get();
    if (const toml::node* e = t->get("max_abs_err")) {
      if (!e->is_number()) r.fail(*e, "'max_abs_err' must be a number");
      c.max_abs_err = e->value<double>();
    }
    plan.candidates.push_back(std::move(c));
  }
  for (const toml::table* t : r.tables(doc, "rejected"))
    plan.rejected.push_back({r.problem(*t, plan.problems.size()), r.config(*t), r.string(*t, "reason")});
  // The counts come first in the file: a plan cut short holds fewer than they say.
  for (auto [name, have] : {std::pair{"problems", plan.problems.size()}, {"candidates", plan.candidates.size()}})
    if (int64_t want = r.integer(doc, name); size_t(want) != have)
      throw PlanError(fmt::format("{}: says {} {} but holds {}: the plan is truncated or was edited; prepare it "
                                  "again (tilec autotune … --prepare)",
                                  source, want, name, have));
  return plan;
}

void write_plan(const fs::path& dir, const Plan& plan) {
  fs::path file = dir / kPlanFile, tmp = dir / (std::string(kPlanFile) + ".tmp");
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << format_plan(plan);
    out.flush();
    if (!out) throw PlanError(fmt::format("{}: cannot write", tmp.string()));
  }
  std::error_code ec;
  fs::rename(tmp, file, ec);
  if (ec) throw PlanError(fmt::format("{}: cannot rename into place: {}", file.string(), ec.message()));
}

Plan read_plan(const fs::path& dir) {
  fs::path file = dir / kPlanFile;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw PlanError(fmt::format("{}: no such folder (prepare a plan with tilec autotune … --prepare DIR)",
                                dir.string()));
  std::ifstream in(file, std::ios::binary);
  if (!in) throw PlanError(fmt::format("{}: missing; {} is not a plan folder", file.string(), dir.string()));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_plan(text, file.string());
}

fs::path candidate_dir(const fs::path& plan_dir, const std::string& arch, const PlanCandidate& c) {
  return plan_dir / "modules" / arch / c.modules;
}

std::string check_candidate_modules(const fs::path& plan_dir, const std::string& arch, const PlanCandidate& c) {
  fs::path dir = candidate_dir(plan_dir, arch, c);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return fmt::format("{}: missing", dir.string());
  size_t manifests = 0;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const fs::path& f = entry.path();
    if (f.extension() != ".toml" || f.filename().string().find(".kernel.") != std::string::npos) continue;
    ++manifests;
    try {
      std::string why = rt::check_module(rt::read_manifest(f));
      if (!why.empty()) return why;
    } catch (const rt::ManifestError& e) {
      return e.what();
    }
  }
  if (manifests == 0) return fmt::format("{}: holds no module manifest (*.toml)", dir.string());
  return "";
}

Shard parse_shard(const std::string& text, const std::string& flag) {
  if (text.empty()) return {};
  unsigned long i = 0, n = 0;
  char extra = 0;
  if (std::sscanf(text.c_str(), "%lu/%lu%c", &i, &n, &extra) != 2 || n < 1 || i < 1 || i > n || n > 100000)
    throw UserError(fmt::format("{} '{}': expected I/N with 1 <= I <= N (e.g. 2/8)", flag, text));
  return {i - 1, n};
}

} // namespace tilec::measure
