#include "loadscope/bench/decode_only.h"

#include <turbojpeg.h>

#include <atomic>
#include <chrono>
#include <vector>

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

namespace loadscope::bench {

DecodeOnlyResult turbojpeg_decode_only(const std::vector<std::string>& jpegs, int threads,
                                       int repeat) {
  tbb::global_control workers(tbb::global_control::max_allowed_parallelism, threads + 1);
  tbb::task_arena arena(threads, 0);
  std::atomic<long> images{0}, failures{0};
  const size_t total = jpegs.size() * static_cast<size_t>(repeat);
  const auto t0 = std::chrono::steady_clock::now();
  arena.execute([&] {
    tbb::parallel_for(tbb::blocked_range<size_t>(0, total, 1), [&](const auto& range) {
      struct Handle {
        tjhandle h = tjInitDecompress();
        ~Handle() { tjDestroy(h); }
      };
      thread_local Handle tj;
      thread_local std::vector<unsigned char> pixels;
      tjhandle handle = tj.h;
      for (size_t i = range.begin(); i != range.end(); ++i) {
        const std::string& j = jpegs[i % jpegs.size()];
        const auto* data = reinterpret_cast<const unsigned char*>(j.data());
        int w = 0, h = 0, sub = 0, cs = 0;
        if (tjDecompressHeader3(handle, data, j.size(), &w, &h, &sub, &cs) != 0) {
          failures.fetch_add(1);
          continue;
        }
        pixels.resize(static_cast<size_t>(w) * h * 3);
        if (tjDecompress2(handle, data, j.size(), pixels.data(), w, 0, h, TJPF_RGB, 0) != 0) {
          failures.fetch_add(1);
          continue;
        }
        images.fetch_add(1);
      }
    });
  });
  DecodeOnlyResult r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.images = images.load();
  r.failures = failures.load();
  return r;
}

}  // namespace loadscope::bench
