#ifndef DLCACHE_CLIENT_CUDA_JPEG_FEED_H_
#define DLCACHE_CLIENT_CUDA_JPEG_FEED_H_

// The JPEG pipeline inside the background feed (issue 37): a
// FeedPipeline copier that, on the feed's thread, decodes and augments each
// fetched batch of JPEG files with a JpegPipeline into the destination
// given to Submit, so that a trainer's Python thread does nothing per
// batch but submit and take (no producer thread competing for the GIL).
//
//   FeedOptions o;
//   o.output_item_size = JpegPipeline::OutputBytes(t, 1);
//   auto feed = FeedPipeline::Create(o, fetcher,
//                                    JpegFeedCopier(pipeline, stream));
//   auto job = std::make_shared<JpegFeedJob>();
//   job->keys = keys; job->indices = indices; job->transform = t;
//   feed->Submit(keys, dst, JpegPipeline::OutputBytes(t, n), tag, job);
//   FeedBatch b = *feed->Next(absl::InfiniteDuration());
//   // b.status: the batch's; job->results[i].status: item i's (a PNG, a
//   // corrupt JPEG: zeros in the output, for the caller to decode on the
//   // CPU or report).
//
// Leases: the fetched bytes (FeedItems::keepalive) are held until the
// batch's device work is done (the decode reads them in place).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "client/cuda/jpeg_pipeline.h"
#include "dlcache/cuda/feed_pipeline.h"

struct CUstream_st;

namespace dlcache::cuda {

// A JPEG feed batch's context (FeedPipeline::Submit's): what to do in,
// what happened per item out. The copier fills `results` on the feed's
// thread before the batch reaches Next.
struct JpegFeedJob {
  std::vector<std::string> keys;  // for messages
  std::vector<uint64_t> indices;  // dataset indices (crop seeds)
  JpegTransform transform;
  std::vector<JpegItemResult> results;
};

// A copier that runs `pipeline` (used by the feed's thread only while the
// feed lives; it must outlive the feed and the batches' device work) on
// `stream`. A batch submitted without a JpegFeedJob, or with indices that
// do not match its keys, fails with INVALID_ARGUMENT; the pipeline's own
// errors fail the batch; item failures do not (see JpegFeedJob).
FeedPipeline::Copier JpegFeedCopier(JpegPipeline* pipeline,
                                    CUstream_st* stream);

}  // namespace dlcache::cuda

#endif  // DLCACHE_CLIENT_CUDA_JPEG_FEED_H_
