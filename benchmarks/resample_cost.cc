// What one resample costs (a benchmark, not a test: it asserts nothing). A RandomResizedCrop-
// sized case: a 300x290 box of a 320x300 image to 224x224, planar (CHW, the default) and
// interleaved (HWC), every other call mirrored; 5 runs of 3000 calls, median microseconds per
// call, and a checksum of the last output (equal before and after a change that must not alter
// pixels). To compare two versions of resample.cc, build this with each (the flags of the
// library's build; its hot loops pick AVX2 at load time on their own).
//
//   g++ -O3 -std=c++17 -Icsrc benchmarks/resample_cost.cc csrc/loadscope/augment/resample.cc \
//     -o /tmp/resample_cost && /tmp/resample_cost
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "loadscope/augment/resample.h"

using loadscope::augment::Box;
using loadscope::augment::Layout;

int main() {
  const int w = 320, h = 300, out = 224, calls = 3000;
  std::vector<uint8_t> src(static_cast<size_t>(w) * h * 3);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>((i * 7919) % 251);
  std::vector<uint8_t> dst(static_cast<size_t>(out) * out * 3);
  loadscope::augment::Resampler r;
  for (Layout layout : {Layout::kCHW, Layout::kHWC}) {
    std::vector<double> runs;
    for (int run = 0; run < 6; ++run) {  // the first warms up
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < calls; ++i) {
        r.resample(src.data(), w, h, w * 3, Box{5.5, 3.25, 305.5, 293.25}, dst.data(), out, out,
                   layout, i & 1);
      }
      const std::chrono::duration<double, std::micro> t = std::chrono::steady_clock::now() - t0;
      if (run > 0) runs.push_back(t.count() / calls);
    }
    std::sort(runs.begin(), runs.end());
    unsigned sum = 0;
    for (uint8_t v : dst) sum = sum * 31 + v;
    std::printf("%s: %.1f us per call (median of %zu runs, %.1f-%.1f), checksum %u\n",
                layout == Layout::kCHW ? "CHW" : "HWC", runs[runs.size() / 2], runs.size(),
                runs.front(), runs.back(), sum);
  }
}
