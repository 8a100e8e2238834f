#include "base/heap_reuse.hpp"

#include <malloc.h>

namespace motor {

void keep_large_buffers_on_the_heap() {
  // Each call fails only for a value out of glibc's range; these are within it. Setting either
  // also turns off glibc's own threshold moving, which would otherwise undo them.
  (void)mallopt(M_MMAP_THRESHOLD, 2 << 20);
  (void)mallopt(M_TRIM_THRESHOLD, 16 << 20);
}

}  // namespace motor
