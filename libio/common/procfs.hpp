#pragma once
// What the kernel reports about a process, for tools that watch the daemon
// (the benchmark, the tests).
#include <cstdint>
#include <optional>

namespace iofwd {

// User + system CPU seconds the process has used; 0 when it cannot be read.
double process_cpu_seconds(int pid);

// Peak resident memory (VmHWM) in bytes; 0 when it cannot be read.
std::uint64_t process_peak_rss(int pid);

// Bytes of this process's memory the kernel backs with 2 MiB pages
// (AnonHugePages) in the mappings that overlap [begin, begin + length),
// counted whole; nothing when smaps cannot be read.
std::optional<std::uint64_t> huge_page_bytes(const void* begin, std::uint64_t length);

}  // namespace iofwd
