// One libFuzzer entry point per target, chosen at compile time (LOADSCOPE_FUZZ_TARGET).
#include "targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return loadscope::fuzz::LOADSCOPE_FUZZ_TARGET(data, size);
}
