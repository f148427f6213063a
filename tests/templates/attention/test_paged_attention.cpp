#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "tests/templates/test_util.h"
#include "backends/launchers.h"
#include "interp/launcher.h"
#include "runtime/npy.h"
#include "templates/attention/paged_attention.h"

using namespace tilec;
using namespace tilec::templates;
using test::max_err;

namespace {



// Points every block-table slot a sequence does not use far past the cache,
// so reading one is an out-of-bounds error.
void poison_unused_slots(PagedAttentionInputs& in) {
  const auto& s = in.shape;
  for (int64_t b = 0; b < s.batch; ++b) {
    int64_t used = cdiv(in.context_lens.get_int(size_t(b)), s.block_size);
    for (int64_t k = used; k < s.max_blocks; ++k)
      in.block_table.set_int(size_t(b * s.max_blocks + k), 0x7ffffff0 - k);
  }
}

template <class F> std::string error_of(F&& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST_CASE("fused paged attention matches the reference over a grid of configs", "[templates][paged_attention]") {
  auto launcher = interp::make_interpret_launcher();
  uint64_t seed = 10;
  for (ir::DType dt : {ir::DType::f32, ir::DType::f16, ir::DType::bf16})
    for (int64_t ratio : {1, 3, 4})
      for (int64_t sq : {1, 3})
        for (bool alibi : {false, true})
          for (bool softcap : {false, true}) {
            PagedAttentionShape s;
            s.batch = 3;
            s.hkv = 2;
            s.hq = 2 * ratio;
            s.sq = sq;
            s.head_dim = 16;
            s.block_size = 5; // not a power of two, nor a divisor of block_n
            s.max_blocks = 4;
            s.dtype = dt;
            s.alibi = alibi;
            if (softcap) s.softcap = 2.0;
            auto in = make_paged_attention_inputs(s, seed++);
            in.context_lens.set_int(0, 0);  // an empty sequence
            in.context_lens.set_int(1, 10); // exactly at a page boundary
            poison_unused_slots(in);
            auto want = paged_attention_reference(in);
            PagedAttentionConfig cfg;
            cfg.block_n = 8;
            cfg.num_splits = sq == 1 ? 2 : 1;
            INFO("dtype " << ir::dtype_name(dt) << " ratio " << ratio << " sq " << sq << " alibi " << alibi
                          << " softcap " << softcap);
            auto got = run_paged_attention_fused(in, cfg, *launcher);
            CHECK(max_err(got, want) <= test::paged_attention_tolerance(dt));
            for (size_t i = 0; i < size_t(s.hq * s.sq * s.head_dim); ++i) REQUIRE(got.get(i) == 0.0);
          }
}

TEST_CASE("fused paged attention: GQA ratios 1 to 8 and head groups", "[templates][paged_attention]") {
  auto launcher = interp::make_interpret_launcher();
  for (int64_t ratio = 1; ratio <= 8; ++ratio)
    for (int64_t hg : {int64_t(1), ratio}) {
      PagedAttentionShape s;
      s.batch = 2;
      s.hkv = 1;
      s.hq = ratio;
      s.head_dim = 32;
      s.block_size = 16;
      s.max_blocks = 3;
      auto in = make_paged_attention_inputs(s, 100 + ratio);
      poison_unused_slots(in);
      PagedAttentionConfig cfg;
      cfg.head_group = hg;
      cfg.block_n = 16;
      INFO("ratio " << ratio << " head_group " << hg);
      CHECK(max_err(run_paged_attention_fused(in, cfg, *launcher), paged_attention_reference(in)) <= 2e-5);
    }
}

TEST_CASE("fused paged attention: splits, block sizes and page sizes", "[templates][paged_attention]") {
  auto launcher = interp::make_interpret_launcher();
  for (int64_t page : {1, 7, 32})
    for (int64_t block_n : {4, 32})
      for (int64_t splits : {1, 4}) {
        PagedAttentionShape s;
        s.batch = 2;
        s.hq = 4;
        s.hkv = 2;
        s.head_dim = 16;
        s.block_size = page;
        s.max_blocks = 64 / page + 1;
        auto in = make_paged_attention_inputs(s, 7 * page + block_n);
        poison_unused_slots(in);
        PagedAttentionConfig cfg{block_n, 0, 4, splits};
        INFO("page " << page << " block_n " << block_n << " splits " << splits);
        CHECK(max_err(run_paged_attention_fused(in, cfg, *launcher), paged_attention_reference(in)) <= 2e-5);
      }
}

TEST_CASE("a live block-table entry past num_blocks is caught by the interpreter", "[templates][paged_attention]") {
  // Validation is bypassed on purpose here: this proves the bounds checks
  // behind the poisoned-slot tests above would fire if a slot were read.
  PagedAttentionShape s;
  s.batch = 1;
  s.hq = s.hkv = 1;
  s.head_dim = 16;
  s.block_size = 4;
  s.max_blocks = 2;
  auto in = make_paged_attention_inputs(s, 3, 8);
  auto launcher = interp::make_interpret_launcher();
  in.block_table.set_int(1, 99);
  CHECK_THAT(error_of([&] { run_paged_attention_fused(in, {}, *launcher); }), Catch::Contains("block_table[0, 1] = 99"));
}

TEST_CASE("paged attention validation names the input and the numbers", "[templates][paged_attention][errors]") {
  PagedAttentionShape s;
  s.batch = 2;
  s.hq = 4;
  s.hkv = 2;
  s.head_dim = 16;
  s.block_size = 4;
  s.max_blocks = 3;
  auto fresh = [&] { return make_paged_attention_inputs(s, 5, 6); };
  auto msg = [](PagedAttentionInputs in, bool decompose = false) {
    return error_of([&] { validate_paged_attention(in, decompose); });
  };
  CHECK(msg(fresh()).empty());

  auto in = fresh();
  in.context_lens.set_int(1, 13);
  CHECK_THAT(msg(in), Catch::Contains("context_lens[1] = 13") && Catch::Contains("12"));

  in = fresh();
  in.block_table.set_int(1, 6); // a live slot of sequence 0 (ctx 6 uses 2 pages)
  CHECK_THAT(msg(in), Catch::Contains("block_table[0, 1] = 6") && Catch::Contains("num_blocks = 6"));

  in = fresh();
  in.block_table.set_int(2, 1000); // an unused slot: fine for fused, not for decompose
  CHECK(msg(in).empty());
  CHECK_THAT(msg(in, true), Catch::Contains("block_table[0, 2] = 1000") && Catch::Contains("decompose"));

  in = fresh();
  in.shape.hq = 3;
  CHECK_THAT(msg(in), Catch::Contains("Hq = 3") && Catch::Contains("Hkv = 2"));

  in = fresh();
  in.shape.softcap = -1.0;
  CHECK_THAT(msg(in), Catch::Contains("softcap -1"));
  in.shape.softcap = INFINITY;
  CHECK_THAT(msg(in), Catch::Contains("softcap inf"));

  in = fresh();
  in.shape.softmax_scale = NAN;
  CHECK_THAT(msg(in), Catch::Contains("not finite"));

  in = fresh();
  in.k_cache = launch::Buffer("k_cache", ir::DType::f16, in.k_cache.count());
  CHECK_THAT(msg(in), Catch::Contains("k_cache") && Catch::Contains("f16"));

  in = fresh();
  in.v_cache = launch::Buffer("v_cache", ir::DType::f32, 10);
  CHECK_THAT(msg(in), Catch::Contains("v_cache: has 10 elements"));

  in = fresh();
  in.shape.kv_fp8 = ir::DType::f8e4m3; // the buffers are still f32
  CHECK_THAT(msg(in), Catch::Contains("k_cache: dtype f32") && Catch::Contains("f8e4m3"));
  PagedAttentionShape s8 = s;
  s8.kv_fp8 = ir::DType::f8e5m2;
  in = make_paged_attention_inputs(s8, 5, 6);
  CHECK(msg(in).empty());
  CHECK(in.shape.k_scale == Approx(1.0 / 57344)); // amax / largest finite
  in.shape.v_scale = NAN;
  CHECK_THAT(msg(in), Catch::Contains("v_scale") && Catch::Contains("nan"));
  in.shape.v_scale = 0;
  CHECK_THAT(msg(in), Catch::Contains("v_scale") && Catch::Contains("positive"));
  in = make_paged_attention_inputs(s8, 5, 6);
  in.shape.kv_fp8 = ir::DType::f16;
  CHECK_THAT(msg(in), Catch::Contains("f8e4m3 or f8e5m2"));
  in = make_paged_attention_inputs(s8, 5, 6);
  in.q = launch::Buffer("q", ir::DType::f8e5m2, in.q.count());
  in.shape.dtype = ir::DType::f8e5m2;
  CHECK_THAT(msg(in), Catch::Contains("q dtype must be f32, f16 or bf16"));

  auto launcher = interp::make_interpret_launcher();
  PagedAttentionConfig bad_group{32, 3, 4, 1};
  CHECK_THAT(error_of([&] { run_paged_attention_fused(fresh(), bad_group, *launcher); }),
             Catch::Contains("head_group 3 does not divide"));
}

TEST_CASE("paged attention inputs round-trip through .npy files", "[templates][paged_attention][npy]") {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / "tilec_pa_npy_test";
  fs::remove_all(dir);
  PagedAttentionShape s;
  s.batch = 2;
  s.hq = 4;
  s.hkv = 2;
  s.sq = 2;
  s.head_dim = 16;
  s.block_size = 4;
  s.max_blocks = 3;
  s.dtype = ir::DType::bf16;
  s.alibi = true;
  auto in = make_paged_attention_inputs(s, 9);
  write_paged_attention_inputs(dir.string(), in);
  auto back = read_paged_attention_inputs(dir.string(), 0.0, std::nullopt);
  CHECK(back.shape.batch == 2);
  CHECK(back.shape.hq == 4);
  CHECK(back.shape.hkv == 2);
  CHECK(back.shape.sq == 2);
  CHECK(back.shape.max_blocks == 3);
  CHECK(back.shape.dtype == ir::DType::bf16);
  CHECK(back.shape.alibi);
  CHECK(back.q.bytes == in.q.bytes);
  CHECK(back.block_table.bytes == in.block_table.bytes);

  // fp8 caches are raw bytes (|u1); the format comes with the read, the scales from the caller.
  s.kv_fp8 = ir::DType::f8e4m3;
  auto in8 = make_paged_attention_inputs(s, 9);
  write_paged_attention_inputs((dir / "fp8").string(), in8);
  CHECK(rt::read_npy((dir / "fp8" / "k_cache.npy").string()).descr == "|u1");
  auto back8 = read_paged_attention_inputs((dir / "fp8").string(), 0.0, std::nullopt, ir::DType::f8e4m3);
  CHECK(back8.k_cache.dtype == ir::DType::f8e4m3);
  CHECK(back8.k_cache.bytes == in8.k_cache.bytes);
  CHECK(back8.v_cache.bytes == in8.v_cache.bytes);
  CHECK_THROWS_WITH(read_paged_attention_inputs((dir / "fp8").string(), 0.0, std::nullopt),
                    Catch::Contains("raw bytes") && Catch::Contains("kv_dtype=f8e4m3"));
  CHECK_THROWS_WITH(read_paged_attention_inputs(dir.string(), 0.0, std::nullopt, ir::DType::f8e5m2),
                    Catch::Contains("k_cache.npy") && Catch::Contains("<u2"));

  // A truncated file and a header that claims more data than the file holds.
  auto q = dir / "q.npy";
  auto size = fs::file_size(q);
  fs::resize_file(q, size - 10);
  CHECK_THROWS_WITH(read_paged_attention_inputs(dir.string(), 0.0, std::nullopt),
                    Catch::Contains("q.npy") && Catch::Contains("claims"));
  {
    std::ofstream f(q, std::ios::binary | std::ios::trunc);
    f << "not numpy at all";
  }
  CHECK_THROWS_WITH(read_paged_attention_inputs(dir.string(), 0.0, std::nullopt), Catch::Contains("bad magic"));
  fs::remove(q);
  CHECK_THROWS_WITH(read_paged_attention_inputs(dir.string(), 0.0, std::nullopt), Catch::Contains("q.npy is missing"));
  fs::remove_all(dir);
}

TEST_CASE("the .npy parser rejects malformed headers with a reason", "[runtime][npy]") {
  auto bytes = [](const std::string& header, size_t data) {
    std::string h = header;
    std::vector<std::byte> out;
    std::string pre = std::string("\x93NUMPY\x01\x00", 8);
    pre += char(h.size() & 0xff);
    pre += char(h.size() >> 8);
    for (char c : pre + h) out.push_back(std::byte(c));
    out.resize(out.size() + data);
    return out;
  };
  auto msg = [](const std::vector<std::byte>& b) {
    try {
      rt::parse_npy(b, "x.npy");
    } catch (const rt::NpyError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(msg(bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24)).empty());
  CHECK_THAT(msg(bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24)), Catch::Contains("Fortran"));
  CHECK_THAT(msg(bytes("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", 24)), Catch::Contains(">f4"));
  CHECK_THAT(msg(bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 23)), Catch::Contains("claims 24"));
  CHECK_THAT(msg(bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }", 24)), Catch::Contains("bad shape"));
  CHECK_THAT(msg(bytes("{'fortran_order': False, 'shape': (2, 3), }", 24)), Catch::Contains("descr"));
  CHECK_THAT(msg(bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999, 99999999999), }", 24)),
             Catch::Contains("x.npy"));
}

TEST_CASE("a cache past 2^31 elements gives the answer a compact one does, touching only its live pages",
          "[templates][paged_attention][large][emulator]") {
  // Each k/v cache holds 2^31 + 64 pages' worth of f16 (4 GiB and more of address space); the
  // live pages are its last ones, so their offsets pass 2^31.
  PagedAttentionShape s;
  s.batch = 2;
  s.hq = 4;
  s.hkv = 2;
  s.head_dim = 64;
  s.block_size = 16;
  s.max_blocks = 4;
  s.dtype = ir::DType::f16;
  const int64_t page = s.block_size * s.hkv * s.head_dim;
  s.num_blocks = (int64_t(1) << 31) / page + 64;
  REQUIRE(s.cache_elements() > (int64_t(1) << 31));
  REQUIRE(s.sparse_cache());
  PagedAttentionInputs big = make_paged_attention_inputs(s, 7, /*ctx=*/-1, /*poison_unused=*/true);
  CHECK(big.k_cache.bytes.lazy());

  // The same sequences over a compact cache: the live pages copied to the front, renumbered.
  PagedAttentionInputs small = big;
  small.shape.num_blocks = s.batch * s.max_blocks;
  small.k_cache = launch::Buffer("k_cache", s.dtype, size_t(small.shape.num_blocks * page));
  small.v_cache = launch::Buffer("v_cache", s.dtype, size_t(small.shape.num_blocks * page));
  int64_t live_pages = 0, top = 0;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t k = 0; k < cdiv(big.context_lens.get_int(size_t(b)), s.block_size); ++k) {
      const size_t slot = size_t(b * s.max_blocks + k);
      const int64_t from = big.block_table.get_int(slot), to = live_pages++;
      top = std::max(top, from);
      for (auto [dst, src] : {std::pair{&small.k_cache, &big.k_cache}, std::pair{&small.v_cache, &big.v_cache}})
        std::copy(src->bytes.begin() + from * page * 2, src->bytes.begin() + (from + 1) * page * 2,
                  dst->bytes.begin() + to * page * 2);
      small.block_table.set_int(slot, to);
    }
  REQUIRE(live_pages >= 2);
  CHECK(top * page > (int64_t(1) << 31)); // a live page past 2^31 elements

  std::vector<std::unique_ptr<launch::Launcher>> launchers;
  launchers.push_back(interp::make_interpret_launcher());
  launchers.push_back(backends::make_emulate_launcher(backends::EmuLowering::emu));
  launchers.push_back(backends::make_emulate_launcher(backends::EmuLowering::nvptx));
  PagedAttentionConfig cfg{32, 2, 2, 1, 2};
  for (auto& l : launchers) {
    INFO(l->backend());
    launch::Buffer want = run_paged_attention_fused(small, cfg, *l);
    launch::Buffer got = run_paged_attention_fused(big, cfg, *l);
    CHECK(got.bytes == want.bytes);
    CHECK(max_err(got, paged_attention_reference(big)) <= test::paged_attention_tolerance(s.dtype));
  }
  // The decomposition gathers the padded block table; its unused entries point at page 0.
  auto l = backends::make_emulate_launcher(backends::EmuLowering::emu);
  launch::Buffer table_big = block_table_unused_cleared(big), table_small = block_table_unused_cleared(small);
  launch::Buffer want = run_paged_attention_decomposed(small, *l, &table_small);
  launch::Buffer got = run_paged_attention_decomposed(big, *l, &table_big);
  CHECK(got.bytes == want.bytes);
  // Only the live pages (and page 0, read by the decomposition) ever took memory.
  for (const launch::Buffer* c : {&big.k_cache, &big.v_cache}) {
    INFO(c->name << " resident " << c->bytes.resident_bytes());
    CHECK(c->bytes.resident_bytes() <= size_t(live_pages + 1) * size_t(page * 2) + 64 * 4096);
  }
}
