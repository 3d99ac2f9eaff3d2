#include "dlcache/client.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/rpc/client_core.h"
#include "common/numa_topology.h"

namespace dlcache {

std::string DefaultSocketPath() {
  const char* env = std::getenv("DLCACHE_SOCKET");
  if (env != nullptr && *env != '\0') return env;
  return "/run/dlcache/dlcached.sock";
}

Item::Item(Item&& other) noexcept
    : status_(std::move(other.status_)),
      file_size_(other.file_size_),
      chunk_count_(other.chunk_count_),
      hit_(other.hit_),
      chunks_(std::move(other.chunks_)),
      leases_(std::move(other.leases_)),
      owner_(std::move(other.owner_)) {
  other.chunks_.clear();
  other.leases_.clear();
}

Item& Item::operator=(Item&& other) noexcept {
  if (this != &other) {
    Release();
    status_ = std::move(other.status_);
    file_size_ = other.file_size_;
    chunk_count_ = other.chunk_count_;
    hit_ = other.hit_;
    chunks_ = std::move(other.chunks_);
    leases_ = std::move(other.leases_);
    owner_ = std::move(other.owner_);
    other.chunks_.clear();
    other.leases_.clear();
  }
  return *this;
}

Item::~Item() { Release(); }

void Item::Release() {
  if (owner_ != nullptr && !leases_.empty()) {
    owner_->core->QueueRelease(owner_->generation, leases_);
  }
  leases_.clear();
  chunks_.clear();
  // Dropping the owner last: it may be the final reference, which ends the
  // session and unmaps the chunks cleared above.
  owner_.reset();
}

uint64_t Item::size() const {
  uint64_t total = 0;
  for (const ChunkView& c : chunks_) total += c.size;
  return total;
}

std::optional<absl::Span<const std::byte>> Item::contiguous() const {
  if (chunks_.empty()) return absl::Span<const std::byte>();
  if (chunks_.size() > 1) return std::nullopt;
  return absl::Span<const std::byte>(chunks_[0].data, chunks_[0].size);
}

absl::Status Item::CopyTo(absl::Span<std::byte> dst) const {
  const uint64_t need = size();
  if (dst.size() < need) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CopyTo: destination holds ", dst.size(), " bytes, item has ", need));
  }
  std::byte* out = dst.data();
  for (const ChunkView& c : chunks_) {
    if (c.size == 0) continue;
    std::memcpy(out, c.data, c.size);
    out += c.size;
  }
  return absl::OkStatus();
}

Batch& Batch::operator=(Batch&& other) noexcept {
  if (this != &other) {
    Release();
    items_ = std::move(other.items_);
    other.items_.clear();
  }
  return *this;
}

Batch::~Batch() { Release(); }

void Batch::Release() {
  // The items of one batch share one owner: gather their leases and queue
  // them under a single lock instead of one per item.
  std::shared_ptr<const internal::LeaseOwner> owner;
  std::vector<uint64_t> leases;
  for (Item& item : items_) {
    if (item.owner_ == nullptr) continue;
    if (owner == nullptr) {
      owner = item.owner_;
      leases.reserve(items_.size());
    }
    if (item.owner_ != owner) {
      item.Release();  // from another batch (moved in): on its own
      continue;
    }
    leases.insert(leases.end(), item.leases_.begin(), item.leases_.end());
    item.leases_.clear();
    item.chunks_.clear();
    item.owner_.reset();
  }
  if (owner != nullptr) owner->core->QueueRelease(owner->generation, leases);
}

Client::Client(std::shared_ptr<internal::ClientCore> core)
    : core_(std::move(core)) {}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(
    const ClientOptions& options) {
  absl::StatusOr<std::shared_ptr<internal::ClientCore>> core =
      internal::ClientCore::Connect(options);
  if (!core.ok()) return core.status();
  return std::unique_ptr<Client>(new Client(*std::move(core)));
}

Client::~Client() {
  // Items that outlive the Client keep the core (and the session) alive;
  // what was released so far goes out now rather than after release_delay.
  if (core_ != nullptr) core_->FlushReleases().IgnoreError();
}

absl::StatusOr<Batch> Client::GetBatch(absl::string_view dataset,
                                       absl::Span<const std::string> paths) {
  return core_->GetBatch(dataset, paths);
}

absl::StatusOr<Batch> Client::GetBatch(absl::string_view dataset,
                                       absl::Span<const ItemRequest> items) {
  return core_->GetBatch(dataset, items);
}

absl::StatusOr<Batch> Client::GetBatch(absl::string_view dataset,
                                       absl::Span<const std::string> paths,
                                       const PlanPosition& at) {
  return core_->GetBatch(dataset, paths, &at);
}

absl::Status Client::ReportStall(absl::string_view dataset,
                                 absl::string_view plan, absl::Duration wait,
                                 absl::Duration step, uint64_t batches,
                                 bool final) {
  return core_->ReportStall(dataset, plan, wait, step, batches, final);
}

absl::Status Client::Prefetch(absl::string_view dataset,
                              absl::Span<const std::string> paths) {
  return core_->Prefetch(dataset, paths);
}

absl::Status Client::RegisterPlan(absl::string_view dataset,
                                  absl::string_view plan, uint64_t epoch,
                                  absl::Span<const std::string> paths,
                                  uint64_t offset, bool reset) {
  return core_->RegisterPlan(dataset, plan, epoch, paths, offset, reset);
}

absl::StatusOr<JobPlanState> Client::RegisterJobPlan(
    absl::string_view dataset, absl::string_view plan, JobPlanRank job,
    uint64_t epoch, absl::Span<const std::string> paths, uint64_t offset) {
  return core_->RegisterJobPlan(dataset, plan, job, epoch, paths, offset);
}

absl::StatusOr<std::vector<FileStatus>> Client::Stat(
    absl::string_view dataset, absl::Span<const std::string> paths) {
  return core_->Stat(dataset, paths);
}

absl::StatusOr<std::vector<FileEntry>> Client::List(absl::string_view dataset,
                                                    absl::string_view prefix,
                                                    bool refresh) {
  std::vector<FileEntry> out;
  std::string token;
  bool first = true;
  do {
    absl::StatusOr<dlcache::FileListPage> page =
        core_->ListPage(dataset, prefix, token, 0, refresh && first);
    if (!page.ok()) return page.status();
    first = false;
    if (out.empty()) {
      out = std::move(page->entries);
    } else {
      for (FileEntry& e : page->entries) out.push_back(std::move(e));
    }
    // Tokens are names and only grow; one that does not would page forever.
    if (!page->next_page_token.empty() && page->next_page_token <= token) {
      return absl::DataLossError(absl::StrCat(
          "List: dlcached answered a page token that does not advance ('",
          page->next_page_token, "' after '", token, "')"));
    }
    token = std::move(page->next_page_token);
  } while (!token.empty());
  return out;
}

absl::StatusOr<FileListPage> Client::ListPage(absl::string_view dataset,
                                              absl::string_view prefix,
                                              absl::string_view page_token,
                                              uint32_t max_entries,
                                              bool refresh) {
  return core_->ListPage(dataset, prefix, page_token, max_entries, refresh);
}

absl::Status Client::FlushReleases() { return core_->FlushReleases(); }

std::vector<MappedSegment> Client::segments() const {
  return core_->segments();
}

uint64_t Client::mapping_generation() const {
  return core_->mapping_generation();
}

uint64_t Client::chunk_size() const { return core_->chunk_size(); }

uint64_t Client::session_id() const { return core_->session_id(); }

uint64_t Client::sessions_opened() const { return core_->sessions_opened(); }

absl::Status Client::session_status() const { return core_->session_status(); }

absl::StatusOr<int> NumaNodeOfPciDevice(absl::string_view pci_bus_id) {
  return PciDeviceNumaNode(pci_bus_id, "/sys");
}

}  // namespace dlcache
