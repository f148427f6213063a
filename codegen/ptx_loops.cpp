#include "codegen/ptx_loops.h"

#include <algorithm>
#include <sstream>

namespace tilec::codegen {

namespace {

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t\r");
  return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
}

// An instruction line: not a label, directive, comment or brace.
bool is_instruction(const std::string& l) {
  return !l.empty() && l[0] != '$' && l[0] != '.' && l[0] != '/' && l[0] != '{' && l[0] != '}' &&
         l.back() == ';';
}

// The opcode with up to two modifiers: `@%p1 bra.uni $L__BB0_3;` -> "bra.uni",
// `mma.sync.aligned.m16n8k16...` -> "mma.sync.aligned", `cp.async.cg.shared.global` ->
// "cp.async.cg", `cp.async.wait_group 0` -> "cp.async.wait_group".
std::string opcode(std::string l) {
  if (l[0] == '@') l = l.substr(l.find_first_of(" \t") + 1), l = trim(l);
  std::string op = l.substr(0, l.find_first_of(" \t;"));
  size_t dot = 0;
  for (int i = 0; i < 3 && dot != std::string::npos; ++i) dot = op.find('.', dot + (i ? 1 : 0));
  return dot == std::string::npos ? op : op.substr(0, dot);
}

} // namespace

int PtxLoop::count(const std::string& prefix) const {
  int n = 0;
  for (const auto& [op, c] : opcodes)
    if (op.compare(0, prefix.size(), prefix) == 0) n += c;
  return n;
}

std::vector<PtxLoop> ptx_loops(const std::string& ptx) {
  // One entry per source line; an instruction spanning several lines (mma's operand lists)
  // is joined onto its first line, the others left empty.
  std::vector<std::string> lines;
  std::istringstream in(ptx);
  int open = -1; // the line an unfinished instruction started on
  for (std::string l; std::getline(in, l);) {
    l = trim(l);
    if (open >= 0) {
      lines[size_t(open)] += " " + l;
      lines.push_back("");
      if (!l.empty() && l.back() == ';') open = -1;
      continue;
    }
    lines.push_back(l);
    if (!l.empty() && l[0] != '$' && l[0] != '.' && l[0] != '/' && l[0] != '{' && l[0] != '}' && l.back() != ';' &&
        l.back() != ':')
      open = int(lines.size()) - 1;
  }
  std::map<std::string, int> labels; // label -> line index
  for (size_t i = 0; i < lines.size(); ++i)
    if (lines[i].size() > 1 && lines[i][0] == '$' && lines[i].back() == ':')
      labels[lines[i].substr(0, lines[i].size() - 1)] = int(i);
  std::map<int, int> end_of; // loop head line -> last backward branch line
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    if (!is_instruction(l) || opcode(l).rfind("bra", 0) != 0) continue;
    size_t d = l.find('$');
    if (d == std::string::npos) continue;
    std::string target = l.substr(d, l.find(';', d) - d);
    auto it = labels.find(target);
    if (it != labels.end() && it->second < int(i)) end_of[it->second] = std::max(end_of[it->second], int(i));
  }
  std::vector<PtxLoop> loops;
  for (auto [head, last] : end_of) {
    PtxLoop lp;
    lp.first_line = head + 1;
    lp.last_line = last + 1;
    for (int i = head; i <= last; ++i)
      if (is_instruction(lines[size_t(i)])) {
        ++lp.instructions;
        ++lp.opcodes[opcode(lines[size_t(i)])];
      }
    loops.push_back(lp);
  }
  for (PtxLoop& a : loops)
    for (const PtxLoop& b : loops)
      if (&a != &b && b.first_line >= a.first_line && b.last_line <= a.last_line) ++a.inner_loops;
  return loops;
}

namespace {

int global_reads(const PtxLoop& l) {
  return l.count("ld.global") + l.count("cp.async.cg") + l.count("cp.async.ca") + l.count("cp.async.bulk");
}

int mmas(const PtxLoop& l) { return l.count("mma") + l.count("wgmma.mma_async"); }

// The first outermost loop reading global memory.
const PtxLoop* first_reading_loop(const std::vector<PtxLoop>& loops) {
  for (const PtxLoop& l : loops) {
    if (global_reads(l) == 0) continue;
    bool nested = false;
    for (const PtxLoop& o : loops)
      if (&o != &l && o.first_line <= l.first_line && o.last_line >= l.last_line && global_reads(o) > 0) nested = true;
    if (!nested) return &l;
  }
  return nullptr;
}

// The first loop issuing MMAs that reads no global memory and lies inside no other loop: the
// consumers' K loop of a warp-specialized kernel, whose operands the producer's copies bring.
const PtxLoop* first_mma_only_loop(const std::vector<PtxLoop>& loops) {
  for (const PtxLoop& l : loops) {
    if (mmas(l) == 0 || global_reads(l) > 0) continue;
    bool nested = false;
    for (const PtxLoop& o : loops)
      if (&o != &l && o.first_line <= l.first_line && o.last_line >= l.last_line) nested = true;
    if (!nested) return &l;
  }
  return nullptr;
}

// The loop reading global memory is a producer's when it only issues TMA copies and another
// loop issues the MMAs.
bool is_producer(const PtxLoop& reading, const std::vector<PtxLoop>& loops) {
  return reading.count("cp.async.bulk") > 0 && mmas(reading) == 0 && first_mma_only_loop(loops) != nullptr;
}

std::optional<PtxLoop> kernel_loop(const ir::Function& kernel, const std::string& ptx,
                                   const PtxLoop* (*pick)(const std::vector<PtxLoop>&)) {
  bool has_loop = false;
  ir::walk(const_cast<ir::Block&>(kernel.body), [&](ir::Op& op) { has_loop = has_loop || op.kind == ir::OpKind::For; });
  if (!has_loop) return std::nullopt;
  std::vector<PtxLoop> loops = ptx_loops(ptx);
  if (const PtxLoop* l = pick(loops)) return *l;
  return std::nullopt;
}

} // namespace

const PtxLoop* main_loop(const std::vector<PtxLoop>& loops) {
  const PtxLoop* reading = first_reading_loop(loops);
  if (reading && is_producer(*reading, loops)) return first_mma_only_loop(loops);
  return reading;
}

const PtxLoop* producer_loop(const std::vector<PtxLoop>& loops) {
  const PtxLoop* reading = first_reading_loop(loops);
  return reading && is_producer(*reading, loops) ? reading : nullptr;
}

std::optional<PtxLoop> kernel_main_loop(const ir::Function& kernel, const std::string& ptx) {
  return kernel_loop(kernel, ptx, main_loop);
}

std::optional<PtxLoop> kernel_producer_loop(const ir::Function& kernel, const std::string& ptx) {
  return kernel_loop(kernel, ptx, producer_loop);
}

} // namespace tilec::codegen
