// An example C++ training loop fed by dlcache through the LibTorch adapter.
//
//   dlcache_torch_train --socket /run/dlcache/dlcached.sock --dataset train
//       --keys keys.txt --device cuda:0 --batch 256 --epochs 2
//       --sample_shape 3,224,224
//
// Reads the keys (one dataset-relative path per line), runs `epochs` passes
// of a small conv net step over uint8 samples reshaped to `sample_shape`
// (all samples must have that many bytes), and prints samples/s and GB/s
// delivered into device memory. The first epoch warms up (CUDA context,
// allocator, kernels) and is left out of the rate when there are two or
// more. On CUDA it also measures, in the same run, the ceiling to compare
// against: without training (--no_train) the pinned host -> device copy of
// the same bytes; with training the same steps on a batch already resident
// on the device (the compute-bound rate).

#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "dlcache/torch/cache_dataset.h"

namespace dt = dlcache::torch_adapter;

namespace {

struct Args {
  std::string socket, dataset = "default", keys_file, device = "cpu";
  int64_t batch = 256, epochs = 2, prefetch = 2;
  std::vector<int64_t> shape = {3, 224, 224};
  bool train = true;
};

void Usage(const char* argv0) {
  std::printf(
      "usage: %s --keys FILE [--socket PATH] [--dataset NAME] "
      "[--device cpu|cuda:N] [--batch N] [--epochs N] [--prefetch N] "
      "[--sample_shape C,H,W] [--no_train]\n",
      argv0);
}

bool Parse(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", f.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (f == "--help" || f == "-h") return false;
    if (f == "--socket")
      a->socket = value();
    else if (f == "--dataset")
      a->dataset = value();
    else if (f == "--keys")
      a->keys_file = value();
    else if (f == "--device")
      a->device = value();
    else if (f == "--batch")
      a->batch = std::stoll(value());
    else if (f == "--epochs")
      a->epochs = std::stoll(value());
    else if (f == "--prefetch")
      a->prefetch = std::stoll(value());
    else if (f == "--no_train")
      a->train = false;
    else if (f == "--sample_shape") {
      a->shape.clear();
      std::stringstream in(value());
      for (std::string d; std::getline(in, d, ',');)
        a->shape.push_back(std::stoll(d));
    } else {
      std::fprintf(stderr, "unknown flag %s\n", f.c_str());
      return false;
    }
  }
  return !a->keys_file.empty() && a->batch > 0 && a->epochs > 0;
}

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void Sync(const torch::Device& d) {
  if (d.is_cuda()) torch::cuda::synchronize(d.index());
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!Parse(argc, argv, &a)) {
    Usage(argv[0]);
    return 2;
  }
  std::vector<std::string> keys;
  std::ifstream in(a.keys_file);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) keys.push_back(line);
  }
  if (keys.empty()) {
    std::fprintf(stderr, "no keys in %s\n", a.keys_file.c_str());
    return 2;
  }
  try {
    const torch::Device device(a.device);
    dt::ConnectOptions co;
    co.socket_path = a.socket;
    co.client_name = "torch-train-example";
    dt::CacheDatasetOptions o;
    o.dataset = a.dataset;
    o.keys = keys;
    o.device = device;
    o.prefetch = static_cast<int>(a.prefetch);
    o.drop_last = true;
    auto loader = torch::data::make_data_loader(
        dt::CacheDataset(dt::Connect(co), o),
        torch::data::DataLoaderOptions(static_cast<size_t>(a.batch)));

    torch::nn::Sequential net(
        torch::nn::Conv2d(
            torch::nn::Conv2dOptions(a.shape[0], 16, 3).stride(2)),
        torch::nn::ReLU(), torch::nn::AdaptiveAvgPool2d(1),
        torch::nn::Flatten(), torch::nn::Linear(16, 10));
    net->to(device);
    torch::optim::SGD opt(net->parameters(), 0.01);
    const int64_t sample = Numel(a.shape);

    auto step = [&](const at::Tensor& x, int64_t n) {
      std::vector<int64_t> shape = {n};
      shape.insert(shape.end(), a.shape.begin(), a.shape.end());
      at::Tensor input = x.view(shape).to(torch::kFloat).div_(255);
      at::Tensor labels = torch::randint(
          10, {n}, torch::TensorOptions().device(device).dtype(torch::kLong));
      opt.zero_grad();
      torch::nn::functional::cross_entropy(net->forward(input), labels)
          .backward();
      opt.step();
    };

    int64_t samples = 0, bytes = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t epoch = 0; epoch < a.epochs; ++epoch) {
      if (epoch == 1) {
        // Epoch 0 was the warm-up: the rate counts from here.
        Sync(device);
        samples = bytes = 0;
        t0 = std::chrono::steady_clock::now();
      }
      for (dt::CacheBatch& b : *loader) {
        for (size_t i = 0; i < b.codes.size(); ++i) {
          if (b.codes[i] != DLC_OK) {
            std::fprintf(stderr, "%s: %s\n", b.keys[i].c_str(),
                         b.errors[i].c_str());
            return 1;
          }
        }
        const auto n = static_cast<int64_t>(b.keys.size());
        at::Tensor x = device.is_cuda() ? b.data : torch::cat(b.items);
        if (x.numel() != n * sample) {
          std::fprintf(stderr, "samples are not %lld bytes each\n",
                       static_cast<long long>(sample));
          return 1;
        }
        samples += n;
        bytes += x.numel();
        if (a.train) step(x, n);
      }
    }
    Sync(device);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    std::printf(
        "dlcache -> %s: %lld samples in %.2f s = %.0f samples/s, "
        "%.2f GB/s%s\n",
        device.str().c_str(), static_cast<long long>(samples), s, samples / s,
        bytes / s / 1e9, a.train ? " (with training)" : "");
    // Samples/s of `one_batch` (one batch's worth of work) run once to warm
    // up, then as many batches as the loop delivered (at least 20).
    auto rate = [&](const std::function<void()>& one_batch) {
      const int64_t rounds = std::max<int64_t>(samples / a.batch, 20);
      one_batch();
      Sync(device);
      const auto c0 = std::chrono::steady_clock::now();
      for (int64_t r = 0; r < rounds; ++r) one_batch();
      Sync(device);
      const double cs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - c0)
              .count();
      return rounds * a.batch / cs;
    };
    if (device.is_cuda() && samples > 0 && a.train) {
      // The ceiling with training: the same steps on a batch that is
      // already in device memory, so no input pipeline at all.
      at::Tensor resident = torch::randint(
          256, {a.batch * sample},
          torch::TensorOptions().device(device).dtype(torch::kByte));
      const double ceiling = rate([&] { step(resident, a.batch); });
      std::printf(
          "compute-bound (device-resident batch) on %s: %.0f samples/s; "
          "dlcache = %.2fx of it\n",
          device.str().c_str(), ceiling, (samples / s) / ceiling);
    } else if (device.is_cuda() && samples > 0) {
      // The ceiling: the same bytes per batch, pinned host -> device.
      at::Tensor host = torch::empty({a.batch * sample},
                                     torch::TensorOptions().dtype(torch::kByte))
                            .pin_memory();
      at::Tensor dev =
          torch::empty_like(host, torch::TensorOptions().device(device));
      const double ceiling = rate([&] { dev.copy_(host, true); });
      std::printf(
          "pinned host -> %s ceiling: %.0f samples/s, %.2f GB/s; "
          "dlcache = %.2fx of it\n",
          device.str().c_str(), ceiling, ceiling * sample / 1e9,
          (samples / s) / ceiling);
    }
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "%s\n", e.what_without_backtrace());
    return 1;
  }
  return 0;
}
