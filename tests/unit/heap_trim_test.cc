// ConfigureHeap and ReleaseFreeHeap (common/heap_trim.h). A binary of its
// own: malloc's arena limit applies to arenas made after it is set, so no
// other test may have started threads first.

#include "common/heap_trim.h"

#include <malloc.h>
#include <stdio.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace dlcache {
namespace {

#if defined(__GLIBC__)

int Arenas() {
  char* xml = nullptr;
  size_t size = 0;
  FILE* f = ::open_memstream(&xml, &size);
  if (f == nullptr) return -1;
  ::malloc_info(0, f);
  std::fclose(f);
  int n = 0;
  for (const char* at = xml; (at = std::strstr(at, "<heap nr=")); ++at) ++n;
  std::free(xml);
  return n;
}

uint64_t RssAnonKb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("RssAnon:", 0) == 0) {
      return std::strtoull(line.c_str() + 8, nullptr, 10);
    }
  }
  return 0;
}

TEST(HeapTrimTest, ArenasStayWithinTheLimitAndFreedPagesGoBack) {
  ConfigureHeap(2);
  // Eight threads allocating at once would get eight arenas by default.
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([] {
      std::vector<void*> blocks;
      for (int i = 0; i < 256; ++i) blocks.push_back(std::malloc(8192));
      for (void* b : blocks) std::free(b);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LE(Arenas(), 2);

  // 64 MiB of 8 KiB blocks, freed but for the last one: the free space
  // lies below a live block, so only a trim gives it back.
  std::vector<void*> blocks;
  for (int i = 0; i < 8192; ++i) {
    void* b = std::malloc(8192);
    std::memset(b, 1, 8192);
    blocks.push_back(b);
  }
  for (size_t i = 0; i + 1 < blocks.size(); ++i) std::free(blocks[i]);
  const uint64_t before = RssAnonKb();
  ReleaseFreeHeap();
  const uint64_t after = RssAnonKb();
  EXPECT_LT(after + 32 * 1024, before) << before << " kB -> " << after << " kB";
  std::free(blocks.back());
}

#else

TEST(HeapTrimTest, NothingToDoWithoutGlibc) {
  ConfigureHeap(2);
  ReleaseFreeHeap();
}

#endif

}  // namespace
}  // namespace dlcache
