// Input fuzzing of the tuning-database reader (runtime/tuning_db.h): any bytes either
// parse or raise TuningDbError naming `fuzz-input:line:column`. A parsed database must
// format, parse back to the same entries and format to the same text, and selecting
// each entry's own kernel, device and key must find an exact match.
#include "fuzz/targets/fuzz_target.h"

#include <bit>
#include <cmath>

#include "runtime/tuning_db.h"

using namespace tilec;
using namespace tilec::fuzz_targets;

namespace {

template <class T>
bool same_number(const T& a, const T& b) {
  if constexpr (std::is_floating_point_v<T>)
    return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b) || (std::isnan(a) && std::isnan(b));
  else
    return a == b;
}

template <class T>
bool same_number(const std::optional<T>& a, const std::optional<T>& b) {
  return a.has_value() == b.has_value() && (!a || same_number(*a, *b));
}

bool same_entry(const rt::TuningEntry& a, const rt::TuningEntry& b) {
  return a.same_slot(b) && same_number(a.median_ms, b.median_ms) && same_number(a.min_ms, b.min_ms) &&
         same_number(a.max_ms, b.max_ms) && a.repeats == b.repeats && same_number(a.gbps, b.gbps) &&
         a.ideal_bytes == b.ideal_bytes && a.bytes_loaded == b.bytes_loaded &&
         a.bytes_stored == b.bytes_stored && a.unique_bytes == b.unique_bytes &&
         same_number(a.max_abs_err, b.max_abs_err) &&
         (a.measured_at.empty() || a.measured_at == b.measured_at); // formatting stamps an empty one
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string source(kSource);
  auto db = read_or_reject<rt::TuningDbError>(source, [&] { return rt::parse_tuning_db(as_text(data, size), source); });
  if (!db) return 0;

  std::string text = must("format_tuning_db(parsed db)", [&] { return rt::format_tuning_db(*db); });
  rt::TuningDb back = must("parse_tuning_db(format_tuning_db(parsed db))", [&] { return rt::parse_tuning_db(text, "formatted"); });
  require(back.entries.size() == db->entries.size(), "format -> parse changes the number of entries", text);
  for (size_t i = 0; i < back.entries.size(); ++i)
    require(same_entry(db->entries[i], back.entries[i]), "format -> parse changes an entry", text);
  std::string again = must("format_tuning_db(reparsed db)", [&] { return rt::format_tuning_db(back); });
  require(again == text, "format -> parse -> format is not stable", "first:\n" + text + "\nsecond:\n" + again);

  for (size_t i = 0; i < back.entries.size() && i < 8; ++i) {
    const rt::TuningEntry& e = back.entries[i];
    auto chosen = must("select_config(an entry's own key)", [&] { return rt::select_config(back, e.kernel, e.device, e.key, {}); });
    require(chosen && chosen->rule == "exact", "select_config misses an entry's own key", text);
  }
  return 0;
}
