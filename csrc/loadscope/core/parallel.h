#pragma once
// Parallel work outside an epoch (parsing a manifest, scanning a folder) in an arena of its
// own whose workers are joined when it ends. oneTBB's implicit arena keeps its workers for
// the life of the process, and a process forked while they exist cannot run tasks again
// (Note [fork during an epoch] in engine.cc): a Folder made before a DataLoader forks its
// workers would hang them.

#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#include <utility>

namespace loadscope {

template <typename F>
auto run_parallel(F&& fn) -> decltype(fn()) {
  struct Scope {
    tbb::task_scheduler_handle handle{tbb::attach{}};
    tbb::task_arena arena;
    ~Scope() {  // also when fn throws (a bad row)
      arena.terminate();
      // Joins the workers unless another user of oneTBB in the process (a running epoch)
      // holds them; then they stay, as they would for that user anyway.
      tbb::finalize(handle, std::nothrow);
    }
  } scope;
  return scope.arena.execute(std::forward<F>(fn));
}

}  // namespace loadscope
