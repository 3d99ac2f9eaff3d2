// JpegDecoder over nvJPEG, loaded with dlopen (the build has no nvJPEG:
// nvjpeg_api.h declares what is used). Every nvJPEG call's status becomes
// an absl::Status naming the call.

#include <dlfcn.h>
#include <glob.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cuda/jpeg_decoder.h"
#include "client/cuda/nvjpeg_api.h"
#include "common/logging.h"

namespace dlcache::cuda::internal {
namespace {

const char* StatusName(int st) {
  switch (st) {
    case nvj::kSuccess:
      return "NVJPEG_STATUS_SUCCESS";
    case nvj::kNotInitialized:
      return "NVJPEG_STATUS_NOT_INITIALIZED";
    case nvj::kInvalidParameter:
      return "NVJPEG_STATUS_INVALID_PARAMETER";
    case nvj::kBadJpeg:
      return "NVJPEG_STATUS_BAD_JPEG";
    case nvj::kJpegNotSupported:
      return "NVJPEG_STATUS_JPEG_NOT_SUPPORTED";
    case nvj::kAllocatorFailure:
      return "NVJPEG_STATUS_ALLOCATOR_FAILURE";
    case nvj::kExecutionFailed:
      return "NVJPEG_STATUS_EXECUTION_FAILED";
    case nvj::kArchMismatch:
      return "NVJPEG_STATUS_ARCH_MISMATCH";
    case nvj::kInternalError:
      return "NVJPEG_STATUS_INTERNAL_ERROR";
    case nvj::kImplementationNotSupported:
      return "NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED";
    case nvj::kIncompleteBitstream:
      return "NVJPEG_STATUS_INCOMPLETE_BITSTREAM";
    default:
      return "NVJPEG_STATUS_(unknown)";
  }
}

std::string Describe(int st, const char* call) {
  return absl::StrCat(call, ": ", StatusName(st), " (", st, ")");
}

// Errors about the image (the caller's data) vs. about the library.
absl::Status ImageError(int st, const char* call) {
  if (st == nvj::kAllocatorFailure) {
    return absl::ResourceExhaustedError(Describe(st, call));
  }
  if (st == nvj::kBadJpeg || st == nvj::kJpegNotSupported ||
      st == nvj::kInvalidParameter || st == nvj::kIncompleteBitstream) {
    return absl::InvalidArgumentError(Describe(st, call));
  }
  return absl::InternalError(Describe(st, call));
}

// The loaded library: resolved once per process, never unloaded (nvJPEG
// keeps CUDA state that must not outlive its code).
struct Library {
  std::string path;
  nvj::GetPropertyFn get_property = nullptr;
  nvj::CreateExFn create_ex = nullptr;
  nvj::DestroyFn destroy = nullptr;
  nvj::JpegStateCreateFn state_create = nullptr;
  nvj::JpegStateDestroyFn state_destroy = nullptr;
  nvj::GetImageInfoFn get_image_info = nullptr;
  nvj::DecodeFn decode = nullptr;
  nvj::DecodeBatchedInitializeFn batched_init = nullptr;
  nvj::DecodeBatchedFn batched = nullptr;
  std::string version;
};

std::vector<std::string> Candidates(const std::string& configured) {
  if (!configured.empty()) return {configured};
  if (const char* env = std::getenv("DLCACHE_NVJPEG_LIB");
      env != nullptr && env[0] != '\0') {
    return {env};
  }
  const char* names[] = {"libnvjpeg.so.13", "libnvjpeg.so.12", "libnvjpeg.so"};
  std::vector<std::string> dirs = {"/usr/local/cuda/lib64",
                                   "/usr/local/cuda/targets/x86_64-linux/lib"};
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    if (const char* v = std::getenv(var); v != nullptr && v[0] != '\0') {
      dirs.insert(dirs.begin(), absl::StrCat(v, "/lib64"));
    }
  }
  // Versioned toolkits (/usr/local/cuda-13.0) where /usr/local/cuda is
  // missing or points elsewhere; newest first.
  for (const char* pattern : {"/usr/local/cuda-*/targets/x86_64-linux/lib",
                              "/usr/local/cuda-*/lib64"}) {
    glob_t g{};
    if (glob(pattern, 0, nullptr, &g) == 0) {
      for (size_t i = g.gl_pathc; i > 0; --i) {
        dirs.push_back(g.gl_pathv[i - 1]);
      }
    }
    globfree(&g);
  }
  // Bare names first: the dynamic loader's own search, which also finds
  // a copy the process already loaded (e.g. torchvision's).
  std::vector<std::string> out(std::begin(names), std::end(names));
  for (const std::string& d : dirs) {
    for (const char* n : names) out.push_back(absl::StrCat(d, "/", n));
  }
  return out;
}

absl::StatusOr<std::shared_ptr<const Library>> LoadLibrary(
    const std::string& configured) {
  std::vector<std::string> tried;
  for (const std::string& cand : Candidates(configured)) {
    void* h = dlopen(cand.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* e = dlerror();
      std::string err = e != nullptr ? e : cand;
      // A library found by path whose dependency (libcudart.so.13, ...)
      // is not on the loader's path: CUDA toolkits keep it in the same
      // folder. Load it from there by path, then try once more.
      const size_t slash = cand.rfind('/');
      const size_t colon = err.find(": cannot open shared object file");
      if (slash != std::string::npos && colon != std::string::npos &&
          err.compare(0, cand.size(), cand) != 0) {
        const std::string dep = err.substr(0, colon);
        if (dep.find('/') == std::string::npos) {
          const std::string dep_path = cand.substr(0, slash + 1) + dep;
          if (dlopen(dep_path.c_str(), RTLD_NOW | RTLD_GLOBAL) != nullptr) {
            h = dlopen(cand.c_str(), RTLD_NOW | RTLD_LOCAL);
            if (h == nullptr) {
              const char* e2 = dlerror();
              err = e2 != nullptr ? e2 : cand;
            }
          } else {
            dlerror();
          }
        }
      }
      if (h == nullptr) {
        tried.push_back(err);
        continue;
      }
    }
    auto lib = std::make_shared<Library>();
    lib->path = cand;
    std::vector<std::string> missing;
    auto sym = [&](auto* fn, const char* name) {
      *fn =
          reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(h, name));
      if (*fn == nullptr) missing.push_back(name);
    };
    sym(&lib->get_property, "nvjpegGetProperty");
    sym(&lib->create_ex, "nvjpegCreateEx");
    sym(&lib->destroy, "nvjpegDestroy");
    sym(&lib->state_create, "nvjpegJpegStateCreate");
    sym(&lib->state_destroy, "nvjpegJpegStateDestroy");
    sym(&lib->get_image_info, "nvjpegGetImageInfo");
    sym(&lib->decode, "nvjpegDecode");
    sym(&lib->batched_init, "nvjpegDecodeBatchedInitialize");
    sym(&lib->batched, "nvjpegDecodeBatched");
    if (!missing.empty()) {
      tried.push_back(
          absl::StrCat(cand, ": no ", absl::StrJoin(missing, ", ")));
      // Left loaded: unloading a library that is not nvJPEG may not be safe
      // either (its constructors ran), and this happens once.
      continue;
    }
    int major = 0, minor = 0, patch = 0;
    if (lib->get_property(nvj::kMajorVersion, &major) == nvj::kSuccess &&
        lib->get_property(nvj::kMinorVersion, &minor) == nvj::kSuccess &&
        lib->get_property(nvj::kPatchLevel, &patch) == nvj::kSuccess) {
      lib->version = absl::StrCat(major, ".", minor, ".", patch);
    } else {
      lib->version = "(version unknown)";
    }
    return std::shared_ptr<const Library>(std::move(lib));
  }
  return absl::UnavailableError(absl::StrCat(
      "nvJPEG not found (set DLCACHE_NVJPEG_LIB to libnvjpeg.so's path); "
      "tried: ",
      absl::StrJoin(tried, "; ")));
}

// One process-wide attempt per configured path.
absl::StatusOr<std::shared_ptr<const Library>> Loaded(
    const std::string& configured) {
  static std::mutex mu;
  static auto* cache = new std::vector<
      std::pair<std::string, absl::StatusOr<std::shared_ptr<const Library>>>>;
  std::lock_guard<std::mutex> lock(mu);
  std::string key = configured.empty() ? std::string() : configured;
  if (const char* env = std::getenv("DLCACHE_NVJPEG_LIB");
      key.empty() && env != nullptr) {
    key = absl::StrCat("env:", env);
  }
  for (const auto& [k, v] : *cache) {
    if (k == key) return v;
  }
  cache->emplace_back(key, LoadLibrary(configured));
  return cache->back().second;
}

// A handle and a decode state of one backend.
struct Session {
  const Library* lib = nullptr;
  nvj::Handle handle = nullptr;
  nvj::JpegState state = nullptr;

  Session() = default;
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  ~Session() {
    if (state != nullptr) lib->state_destroy(state);
    if (handle != nullptr) lib->destroy(handle);
  }
};

absl::StatusOr<std::unique_ptr<Session>> OpenSession(const Library& lib,
                                                     int backend) {
  auto s = std::make_unique<Session>();
  s->lib = &lib;
  if (int st = lib.create_ex(backend, nullptr, nullptr, 0, &s->handle);
      st != nvj::kSuccess) {
    s->handle = nullptr;
    return absl::UnavailableError(Describe(st, "nvjpegCreateEx"));
  }
  if (int st = lib.state_create(s->handle, &s->state); st != nvj::kSuccess) {
    s->state = nullptr;
    return absl::UnavailableError(Describe(st, "nvjpegJpegStateCreate"));
  }
  return s;
}

const char* BackendName(int backend) {
  switch (backend) {
    case nvj::kBackendHardware:
      return "hardware";
    case nvj::kBackendGpuHybrid:
      return "gpu_hybrid";
    case nvj::kBackendHybrid:
      return "hybrid";
    default:
      return "default";
  }
}

class NvjpegDecoder final : public JpegDecoder {
 public:
  NvjpegDecoder(std::shared_ptr<const Library> lib,
                std::unique_ptr<Session> main, int backend, std::string why)
      : lib_(std::move(lib)),
        main_(std::move(main)),
        backend_(backend),
        why_(std::move(why)) {}

  std::string Describe() const override {
    return absl::StrCat("nvjpeg ", lib_->version, " ", BackendName(backend_),
                        " (", why_, "; ", lib_->path, "; colour: ",
                        planar_batched_
                            ? "libjpeg's (planar output, fancy upsampling)"
                            : "nvJPEG's RGB output",
                        ")");
  }

  absl::StatusOr<JpegInfo> Inspect(const uint8_t* data, size_t size) override {
    if (data == nullptr || size == 0) {
      return absl::InvalidArgumentError("empty file: not a JPEG");
    }
    int comps = 0;
    nvj::ChromaSubsampling css = 0;
    int widths[nvj::kMaxComponent] = {};
    int heights[nvj::kMaxComponent] = {};
    int st = lib_->get_image_info(main_->handle, data, size, &comps, &css,
                                  widths, heights);
    if (st != nvj::kSuccess) {
      return ImageError(st, "nvjpegGetImageInfo (not a JPEG nvJPEG reads)");
    }
    if (widths[0] <= 0 || heights[0] <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "nvjpegGetImageInfo: bad size ", widths[0], "x", heights[0]));
    }
    JpegInfo info;
    info.width = widths[0];
    info.height = heights[0];
    info.components = comps;
    if (comps == 3) {
      info.chroma_width = widths[1];
      info.chroma_height = heights[1];
      ChromaFactors(css, info);
    }
    return info;
  }

  absl::Status Decode(absl::Span<const JpegSource> images,
                      absl::Span<const JpegTarget> targets, CUstream_st* stream,
                      absl::Span<JpegDecodeResult> results) override {
    const size_t n = images.size();
    if (targets.size() != n || results.size() != n) {
      return absl::InvalidArgumentError("Decode: spans of different sizes");
    }
    if (n == 0) return absl::OkStatus();
    for (JpegDecodeResult& r : results) r = JpegDecodeResult{};
    // What goes one by one from the start: 4-component images (the
    // batched hardware path takes 1 and 3 components only).
    std::vector<size_t> alone;
    std::vector<size_t> batch;
    for (size_t i = 0; i < n; ++i) {
      (images[i].components == 4 ? alone : batch).push_back(i);
    }
    if (batched_usable_ && !batch.empty()) {
      bool planar = planar_batched_ && AllPlanar(targets, batch);
      absl::Status st = DecodeBatched(images, targets, batch, planar, stream);
      if (!st.ok() && planar && !planar_batched_worked_ &&
          DecodeBatched(images, targets, batch, false, stream).ok()) {
        // The engines write RGB but not planar output: nvJPEG's own colour
        // conversion from now on (4:2:0 chroma then differs from
        // libjpeg's: docs/jpeg_pipeline.md).
        planar_batched_ = false;
        planar = false;
        st = absl::OkStatus();
        DLC_LOG(WARNING) << "nvJPEG batched decode refused planar YCbCr "
                            "output: using its RGB output instead";
      }
      if (st.ok()) {
        planar_batched_worked_ |= planar;
        Succeeded(batch, planar, results);
        counters_.batched_images += batch.size();
        batch.clear();
        batch_only_failures_ = 0;
      } else {
        ++counters_.batch_failures;
        if (!batch_failure_logged_) {
          batch_failure_logged_ = true;
          DLC_LOG(WARNING) << "nvJPEG batched decode failed (" << st.message()
                           << "); decoding that batch image by image (logged "
                              "once)";
        }
        // Greyscale images may be what the engines refused: once more
        // with the colour ones only, the others one by one.
        std::vector<size_t> colour;
        for (size_t i : batch) {
          if (images[i].components == 3) {
            colour.push_back(i);
          } else {
            alone.push_back(i);
          }
        }
        if (!colour.empty() && colour.size() < batch.size()) {
          batch.swap(colour);
          if (DecodeBatched(images, targets, batch, planar, stream).ok()) {
            Succeeded(batch, planar, results);
            counters_.batched_images += batch.size();
            batch.clear();
          } else {
            ++counters_.batch_failures;
          }
        } else {
          // Nothing to leave out: every image of `batch` goes alone
          // (those just moved to `alone` are not in it twice).
          batch.swap(colour);
        }
      }
    }
    alone.insert(alone.end(), batch.begin(), batch.end());
    if (alone.empty()) return absl::OkStatus();
    // One by one, on a session that decodes single images: per-image
    // statuses, and whatever the hardware engines do not take.
    Session* single = nullptr;
    if (absl::StatusOr<Session*> s = SingleSession(); s.ok()) {
      single = *s;
    } else {
      return s.status();
    }
    const uint64_t failed_before = counters_.failed_images;
    for (size_t i : alone) {
      bool planar = planar_single_ && targets[i].planes[0] != nullptr;
      int st = DecodeOne(*single, images[i], targets[i], planar, stream);
      if (st != nvj::kSuccess && planar && !planar_single_worked_ &&
          DecodeOne(*single, images[i], targets[i], false, stream) ==
              nvj::kSuccess) {
        planar_single_ = false;
        planar = false;
        st = nvj::kSuccess;
        DLC_LOG(WARNING) << "nvJPEG single-image decode refused planar "
                            "YCbCr output: using its RGB output instead";
      }
      if (st == nvj::kSuccess) {
        planar_single_worked_ |= planar;
        Mark(i, planar, results);
        ++counters_.single_images;
      } else {
        results[i].status = ImageError(st, "nvjpegDecode");
        ++counters_.failed_images;
      }
    }
    if (batched_usable_ && !batch.empty() &&
        counters_.failed_images == failed_before &&
        counters_.batched_images == 0) {
      // The batched call has never worked here and every image of the
      // batches it failed decoded alone: the call, not the data, is at
      // fault. After a few such batches, stop trying it. (Once it has
      // worked, a failure is the data's: an image it does not take.)
      if (++batch_only_failures_ >= 3) {
        batched_usable_ = false;
        DLC_LOG(WARNING) << "nvJPEG batched decode disabled: it failed on "
                            "every batch, whose images all decode one by one";
      }
    }
    return absl::OkStatus();
  }

  JpegDecoderCounters counters() const override { return counters_; }

 private:
  // The subsampling factors of a 3-component image, from nvJPEG's
  // subsampling code (the plane sizes alone are ambiguous for images a
  // few pixels wide); from the sizes where the code says nothing.
  static void ChromaFactors(nvj::ChromaSubsampling css, JpegInfo& info) {
    // Indexed by nvjpegChromaSubsampling_t: 444, 422, 420, 440, 411, 410.
    static constexpr int kFactors[][2] = {{1, 1}, {2, 1}, {2, 2},
                                          {1, 2}, {4, 1}, {4, 2}};
    if (css >= nvj::kCss444 && css <= nvj::kCss410) {
      info.chroma_fx = kFactors[css][0];
      info.chroma_fy = kFactors[css][1];
    } else if (info.chroma_width > 0 && info.chroma_height > 0) {
      info.chroma_fx = (info.width + info.chroma_width - 1) / info.chroma_width;
      info.chroma_fy =
          (info.height + info.chroma_height - 1) / info.chroma_height;
    }
  }

  static bool AllPlanar(absl::Span<const JpegTarget> targets,
                        const std::vector<size_t>& which) {
    for (size_t i : which) {
      if (targets[i].planes[0] == nullptr) return false;
    }
    return true;
  }

  void Succeeded(const std::vector<size_t>& which, bool planar,
                 absl::Span<JpegDecodeResult> results) {
    for (size_t i : which) Mark(i, planar, results);
  }
  void Mark(size_t i, bool planar, absl::Span<JpegDecodeResult> results) {
    results[i].status = absl::OkStatus();
    results[i].planar = planar;
    if (planar) ++counters_.planar_images;
  }

  static nvj::Image Output(const JpegTarget& t, bool planar) {
    nvj::Image img = {};
    if (planar) {
      for (int c = 0; c < 3; ++c) {
        img.channel[c] = t.planes[c];
        img.pitch[c] = t.plane_pitch[c];
      }
    } else {
      img.channel[0] = t.dev;
      img.pitch[0] = t.pitch;
    }
    return img;
  }

  int DecodeOne(Session& session, const JpegSource& image,
                const JpegTarget& target, bool planar, CUstream_st* stream) {
    nvj::Image img = Output(target, planar);
    return lib_->decode(session.handle, session.state, image.data, image.size,
                        planar ? nvj::kOutputYuv : nvj::kOutputRgbi, &img,
                        stream);
  }

  // Decodes images[which[k]] into targets[which[k]] in one batched call.
  absl::Status DecodeBatched(absl::Span<const JpegSource> images,
                             absl::Span<const JpegTarget> targets,
                             const std::vector<size_t>& which, bool planar,
                             CUstream_st* stream) {
    const int n = static_cast<int>(which.size());
    const int format = planar ? nvj::kOutputYuv : nvj::kOutputRgbi;
    if (n != batch_size_ || format != batch_format_) {
      int st = lib_->batched_init(main_->handle, main_->state, n, 1, format);
      if (st != nvj::kSuccess) {
        batch_size_ = -1;
        return ImageError(st, "nvjpegDecodeBatchedInitialize");
      }
      batch_size_ = n;
      batch_format_ = format;
    }
    data_.resize(n);
    lengths_.resize(n);
    outs_.assign(n, nvj::Image{});
    for (int k = 0; k < n; ++k) {
      const size_t i = which[k];
      data_[k] = images[i].data;
      lengths_[k] = images[i].size;
      outs_[k] = Output(targets[i], planar);
    }
    int st = lib_->batched(main_->handle, main_->state, data_.data(),
                           lengths_.data(), outs_.data(), stream);
    if (st != nvj::kSuccess) {
      // The state may be half-initialised for this size: start over.
      batch_size_ = -1;
      return ImageError(st, "nvjpegDecodeBatched");
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Session*> SingleSession() {
    if (backend_ != nvj::kBackendHardware) return main_.get();
    if (single_ == nullptr) {
      // The hardware backend decodes batches; single images (and what the
      // engines refuse) go to the default backend.
      absl::StatusOr<std::unique_ptr<Session>> s =
          OpenSession(*lib_, nvj::kBackendDefault);
      if (!s.ok()) return s.status();
      single_ = std::move(*s);
    }
    return single_.get();
  }

  std::shared_ptr<const Library> lib_;
  std::unique_ptr<Session> main_;
  std::unique_ptr<Session> single_;
  int backend_;
  std::string why_;
  bool batched_usable_ = true;
  bool batch_failure_logged_ = false;
  int batch_only_failures_ = 0;
  int batch_size_ = -1;
  int batch_format_ = -1;
  // Planar YCbCr output until a path has shown it cannot write it.
  bool planar_batched_ = true;
  bool planar_single_ = true;
  bool planar_batched_worked_ = false;
  bool planar_single_worked_ = false;
  std::vector<const unsigned char*> data_;
  std::vector<size_t> lengths_;
  std::vector<nvj::Image> outs_;
  JpegDecoderCounters counters_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<JpegDecoder>> OpenNvjpegDecoder(
    const NvjpegOptions& options) {
  const std::string& want = options.backend;
  if (want != "auto" && want != "hardware" && want != "gpu") {
    return absl::InvalidArgumentError(absl::StrCat(
        "nvJPEG backend must be auto, hardware or gpu, not '", want, "'"));
  }
  absl::StatusOr<std::shared_ptr<const Library>> lib = Loaded(options.library);
  if (!lib.ok()) return lib.status();
  std::vector<int> order;
  if (want != "gpu") order.push_back(nvj::kBackendHardware);
  if (want != "hardware") {
    order.push_back(nvj::kBackendGpuHybrid);
    order.push_back(nvj::kBackendDefault);
  }
  std::vector<std::string> refused;
  for (int backend : order) {
    absl::StatusOr<std::unique_ptr<Session>> s = OpenSession(**lib, backend);
    if (!s.ok()) {
      refused.push_back(
          absl::StrCat(BackendName(backend), ": ", s.status().message()));
      continue;
    }
    std::string why =
        backend == nvj::kBackendHardware
            ? "the GPU's JPEG engines accepted the handle"
        : refused.empty()
            ? absl::StrCat("backend '", want, "' asked for")
            : absl::StrCat("refused: ", absl::StrJoin(refused, "; "));
    auto dec = std::make_unique<NvjpegDecoder>(*lib, std::move(*s), backend,
                                               std::move(why));
    static std::once_flag logged;
    std::call_once(
        logged, [&] { DLC_LOG(INFO) << "JPEG decode: " << dec->Describe(); });
    return std::unique_ptr<JpegDecoder>(std::move(dec));
  }
  return absl::UnavailableError(
      absl::StrCat("nvJPEG ", (*lib)->version, " at ", (*lib)->path,
                   ": no backend usable: ", absl::StrJoin(refused, "; ")));
}

}  // namespace dlcache::cuda::internal
