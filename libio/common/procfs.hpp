#pragma once
// What the kernel reports about a process, for tools that watch the daemon
// (the benchmark, the tests).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace iofwd {

// User + system CPU seconds the process has used; 0 when it cannot be read.
double process_cpu_seconds(int pid);

// The same for each thread of process `pid` alive now, summed by name with
// a trailing "-<number>" dropped ("iod-pull-0" and "iod-pull-1" are
// "iod-pull"); empty when none can be read. The seconds of threads that
// ended are in process_cpu_seconds only.
std::map<std::string, double> thread_cpu_seconds(int pid);

// Peak resident memory (VmHWM) in bytes; 0 when it cannot be read.
std::uint64_t process_peak_rss(int pid);

// Bytes of this process's memory the kernel backs with 2 MiB pages
// (AnonHugePages) in the mappings that overlap [begin, begin + length),
// counted whole; nothing when smaps cannot be read.
std::optional<std::uint64_t> huge_page_bytes(const void* begin, std::uint64_t length);

// Names the calling thread as ps -L, top -H and /proc show it (the kernel
// keeps 15 characters): which of a process's threads burns a core, read at
// a glance. Nothing happens when it cannot be named.
void name_this_thread(const char* name) noexcept;

// The daemon's thread that faults its staging memory in after start
// (iod/staging.cpp), alive until that is done: the benchmark waits for it.
inline constexpr const char* staging_fault_in_thread = "iod-fault-in";

// Whether a thread of process `pid` is named `name` now.
bool has_thread_named(int pid, std::string_view name);

}  // namespace iofwd
