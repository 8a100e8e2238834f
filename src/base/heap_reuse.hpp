// glibc's malloc tuned for a process that moves large records: output frames of up to
// protocol::kMaxFrameBytes, the job log's 256 KiB payloads.
#pragma once

namespace motor {

// By default glibc serves an allocation of 128 KiB or more with its own mmap and returns freed
// memory at the heap's top to the kernel past 128 KiB: every output record then came in fresh,
// zero-filled pages (a page fault per 4 KiB; `perf` put the client's time in exc_page_fault under
// memmove, and its CPU per 256 MiB of output fell from 340-780 ms to 90-150 ms with this). Records
// up to 2 MiB stay on the heap, and up to 16 MiB of freed heap is kept for the next ones. Call
// first thing in main, before any thread starts.
void keep_large_buffers_on_the_heap();

}  // namespace motor
