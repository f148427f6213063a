// Input fuzzing of the module-manifest reader (abi/manifest.h): any bytes either
// parse or raise ManifestError naming the file. A parsed manifest must format and parse
// back to an equal manifest, and format to the same text again.
#include "fuzz/targets/fuzz_target.h"

#include "abi/error.h"
#include "abi/manifest.h"

using namespace tilec;
using namespace tilec::fuzz_targets;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::filesystem::path source = std::filesystem::path("modules") / kSource;
  auto manifest = read_or_reject<rt::ManifestError>(
      source.string(), [&] { return rt::parse_manifest(as_text(data, size), source); });
  if (!manifest) return 0;

  std::string text = must("format_manifest(parsed manifest)", [&] { return rt::format_manifest(*manifest); });
  rt::Manifest back = must("parse_manifest(format_manifest(parsed manifest))",
                           [&] { return rt::parse_manifest(text, source); });
  require(back == *manifest, "format -> parse changes the manifest", text);
  std::string again = must("format_manifest(reparsed manifest)", [&] { return rt::format_manifest(back); });
  require(again == text, "format -> parse -> format is not stable", "first:\n" + text + "\nsecond:\n" + again);
  return 0;
}
