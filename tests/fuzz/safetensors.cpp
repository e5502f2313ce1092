// Fuzz target: safetensors files (safetensors.hpp): the 8-byte header length,
// the JSON header (names, dtypes, shapes, data_offsets, __metadata__) and the
// data ranges. SafetensorsFile::from_bytes, then every tensor's values are read
// as floats (at most 1 M values per input), so a range outside the file shows
// up under ASan.
#include <vector>

#include "fuzz_util.hpp"
#include "kvdecode/weights/blocks.hpp"
#include "kvdecode/kvdecode.hpp"
#include "kvdecode/io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  kvd_fuzz::run([&] {
    const kvd::SafetensorsFile f =
        kvd::SafetensorsFile::from_bytes(std::vector<unsigned char>(data, data + size), "fuzz.safetensors");
    for (const auto& [k, v] : f.metadata()) (void)(k.size() + v.size());
    std::uint64_t budget = 1u << 20;
    std::vector<float> row;
    for (const kvd::SafetensorsTensor& t : f.tensors()) {
      if (f.find(t.name) != &t) {
        std::fprintf(stderr, "FINDING: find('%s') does not return the tensor of tensors()\n", t.name.c_str());
        std::abort();
      }
      if (t.file_offset < f.data_offset() || t.n_bytes > size || t.file_offset > size - t.n_bytes ||
          t.data != f.tensors().front().data - f.tensors().front().file_offset + t.file_offset) {
        std::fprintf(stderr, "FINDING: tensor '%s' [%llu, +%llu) lies outside the data\n", t.name.c_str(),
                     static_cast<unsigned long long>(t.file_offset), static_cast<unsigned long long>(t.n_bytes));
        std::abort();
      }
      const std::uint64_t n = t.n_elements > budget ? budget : t.n_elements;
      budget -= n;
      row.resize(n);
      if (t.bytes) {  // U8: bytes, read as such
        unsigned sum = 0;
        for (std::uint64_t i = 0; i < n; ++i) sum += t.data[i];
        (void)sum;
      } else if (n > 0) {
        kvd::detail::dequantize_row(t.type, t.data, row.data(), static_cast<std::int64_t>(n));
      }
      f.release(t);
    }
  });
  return 0;
}
