// Prints common/epoch_order's rank order, one index per line, for the
// Python test that checks dlcache._order against it
// (tests/integration/python_train_test.py):
//   epoch_order_tool N SEED EPOCH RANK WORLD_SIZE DROP_LAST SHUFFLE
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common/epoch_order.h"

int main(int argc, char** argv) {
  if (argc != 8) {
    std::fprintf(stderr,
                 "usage: %s N SEED EPOCH RANK WORLD_SIZE DROP_LAST SHUFFLE\n",
                 argv[0]);
    return 2;
  }
  const size_t n = std::strtoull(argv[1], nullptr, 10);
  dlcache::EpochOrderOptions o;
  o.seed = std::strtoull(argv[2], nullptr, 10);
  o.epoch = std::strtoull(argv[3], nullptr, 10);
  o.rank = std::strtoull(argv[4], nullptr, 10);
  o.world_size = std::strtoull(argv[5], nullptr, 10);
  o.drop_last = std::atoi(argv[6]) != 0;
  o.shuffle = std::atoi(argv[7]) != 0;
  for (size_t i : dlcache::EpochRankOrder(n, o)) std::printf("%zu\n", i);
  return 0;
}
