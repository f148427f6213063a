#pragma once
// The differential fuzzing loop behind `tilec fuzz` and its CI test: program i of a run is
// generate(seed + i); each runs on the interpreter and the emulator; a disagreement is shrunk
// and saved as a regression file.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "fuzz/generator.h"
#include "fuzz/program.h"
#include "fuzz/runner.h"

namespace tilec::fuzz {

inline constexpr uint64_t kDefaultSeed = 1;

struct FuzzOptions {
  int64_t count = 100;
  uint64_t seed = kDefaultSeed;
  unsigned jobs = 1;     // worker threads
  std::string save_dir;  // where shrunk failures go; empty: not saved
  bool shrink = true;
  int shrink_checks = 400;
  GenOptions gen;
};

struct Failure {
  uint64_t seed = 0;
  Verdict verdict = Verdict::disagree;
  std::string message;   // of the original program
  Program shrunk;        // the original when not shrunk
  int original_ops = 0, shrunk_ops = 0;
  std::string saved;     // the regression file written, if any
};

struct FuzzSummary {
  int64_t programs = 0, agreed = 0;
  std::map<std::string, int64_t> ops;    // op name -> ops generated
  std::map<std::string, int64_t> dtypes; // dtype -> values of it generated (pointees included)
  std::vector<Failure> failures;         // by seed
  double seconds = 0;
};

// Calls `progress(done, line)` after each program (from one thread at a time).
using Progress = std::function<void(int64_t done, const std::string& line)>;
FuzzSummary run_fuzz(const FuzzOptions& o, const Progress& progress = {});

// Writes `p` to `dir`/fuzz_<seed>.tir (the folder is created) with a comment saying what
// failed; returns the path.
std::string save_regression(const Program& p, const std::string& dir, const std::string& what);

} // namespace tilec::fuzz
