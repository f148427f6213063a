#pragma once
// Runs a fuzz program on the interpreter (the oracle) and on another launcher (the emulator)
// from the same inputs and compares every buffer afterwards (fuzz/compare.h).
#include <string>

#include "fuzz/program.h"
#include "launch/launcher.h"

namespace tilec::fuzz {

enum class Verdict {
  agree,
  disagree, // a buffer differs, or the launcher failed where the interpreter did not
  invalid,  // the interpreter rejected the program (a generator bug, or a shrinking step gone too far)
};

struct Outcome {
  Verdict verdict = Verdict::agree;
  std::string message; // what differs or failed; empty when they agree
};

Outcome run_program(const Program& p, launch::Launcher& launcher);

} // namespace tilec::fuzz
