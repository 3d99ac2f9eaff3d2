// A stand-in for libFuzzer's main where the compiler has no libFuzzer
// (GCC): runs every corpus file through LLVMFuzzerTestOneInput, then random
// mutations of them (bit flips, byte sets, truncation, splices, inserted
// boundary integers) until -max_total_time=N seconds pass. Accepts the
// libFuzzer arguments the ctest uses: directories or files, -max_total_time,
// -seed; others starting with '-' are ignored. A crash aborts, as it
// would under libFuzzer. -write_seeds=DIR calls the target's seed writer
// (LLVMFuzzerWriteSeeds, where the target defines one).
#include <dirent.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv)
    __attribute__((weak));
extern "C" int LLVMFuzzerWriteSeeds(const char* dir) __attribute__((weak));

namespace {

void Load(const std::string& path, std::vector<std::string>* out) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    DIR* d = ::opendir(path.c_str());
    if (d == nullptr) return;
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      Load(path + "/" + e->d_name, out);
    }
    ::closedir(d);
    return;
  }
  std::ifstream in(path, std::ios::binary);
  out->emplace_back(std::istreambuf_iterator<char>(in),
                    std::istreambuf_iterator<char>());
}

void Run(const std::string& s) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

std::string Mutate(std::string s, const std::vector<std::string>& corpus,
                   std::mt19937_64& rng) {
  static const uint64_t kBoundaries[] = {
      0,          1,          0x7f,  0x80,        0xff,       0xffff,
      0x7fffffff, 0xffffffff, ~0ull, ~0ull - 100, 1ull << 50, 1ull << 32};
  const int rounds = 1 + rng() % 4;
  for (int r = 0; r < rounds; ++r) {
    switch (rng() % 6) {
      case 0:
        if (!s.empty()) s[rng() % s.size()] ^= 1 << (rng() % 8);
        break;
      case 1:
        if (!s.empty()) s[rng() % s.size()] = static_cast<char>(rng());
        break;
      case 2:
        if (!s.empty()) s.resize(rng() % s.size());
        break;
      case 3: {
        const std::string& other = corpus[rng() % corpus.size()];
        if (!other.empty()) {
          size_t from = rng() % other.size();
          s.insert(rng() % (s.size() + 1), other.substr(from, rng() % 64));
        }
        break;
      }
      case 4: {  // a boundary integer, raw or as a protobuf varint
        uint64_t v = kBoundaries[rng() % std::size(kBoundaries)];
        std::string enc;
        if (rng() % 2) {
          enc.assign(reinterpret_cast<const char*>(&v), sizeof(v));
        } else {
          do {
            enc += static_cast<char>((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
            v >>= 7;
          } while (v != 0);
        }
        size_t at = rng() % (s.size() + 1);
        if (at + enc.size() <= s.size() && rng() % 2) {
          s.replace(at, enc.size(), enc);
        } else {
          s.insert(at, enc);
        }
        break;
      }
      default:
        s.insert(rng() % (s.size() + 1), 1 + rng() % 8,
                 static_cast<char>(rng()));
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  double max_time = 0;
  uint64_t seed = std::random_device{}();
  std::vector<std::string> corpus;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("-max_total_time=", 0) == 0) {
      max_time = std::stod(a.substr(16));
    } else if (a.rfind("-seed=", 0) == 0) {
      seed = std::stoull(a.substr(6));
    } else if (a.rfind("-write_seeds=", 0) == 0) {
      if (!LLVMFuzzerWriteSeeds) return 2;
      return LLVMFuzzerWriteSeeds(a.substr(13).c_str());
    } else if (!a.empty() && a[0] != '-') {
      Load(a, &corpus);
    }
  }
  for (const std::string& s : corpus) Run(s);
  if (corpus.empty()) corpus.push_back("");
  std::mt19937_64 rng(seed);
  uint64_t runs = corpus.size();
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration<double>(max_time);
  while (std::chrono::steady_clock::now() < deadline) {
    for (int k = 0; k < 256; ++k, ++runs) {
      Run(Mutate(corpus[rng() % corpus.size()], corpus, rng));
    }
  }
  std::printf("fuzz replay: %llu inputs (%zu from the corpus), seed %llu\n",
              static_cast<unsigned long long>(runs), corpus.size(),
              static_cast<unsigned long long>(seed));
  return 0;
}
