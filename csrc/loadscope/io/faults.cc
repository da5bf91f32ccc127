#include "loadscope/io/faults.h"

#include <atomic>
#include <mutex>

#include "loadscope/core/error.h"

namespace loadscope::io {

namespace {
std::atomic<bool> g_active{false};
std::mutex g_mutex;
std::vector<ReadFault> g_faults;
}  // namespace

void set_read_faults(std::vector<ReadFault> faults) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_faults = std::move(faults);
  g_active.store(!g_faults.empty(), std::memory_order_relaxed);
}

void check_read_fault(const std::string& path) {
  if (!g_active.load(std::memory_order_relaxed)) return;
  FaultKind kind;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_faults.begin();
    for (; it != g_faults.end(); ++it) {
      if (path.find(it->match) != std::string::npos && it->times != 0) break;
    }
    if (it == g_faults.end()) return;
    if (it->after > 0) {
      --it->after;
      return;
    }
    if (it->times > 0) --it->times;
    kind = it->kind;
  }
  switch (kind) {
    case FaultKind::kIoError: throw ReadFailure("read failed: Input/output error (injected)");
    case FaultKind::kShortRead: throw ReadFailure("short read: the file ended early (injected)");
    case FaultKind::kVanished:
      throw ReadFailure("cannot open: No such file or directory (injected)");
  }
}

}  // namespace loadscope::io
