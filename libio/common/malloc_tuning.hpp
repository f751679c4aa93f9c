#pragma once
// The daemon's malloc setting. Its event loop allocates in bursts (a
// transfer, its handlers and their captures for every small version, a
// batch of them at a time), and glibc's per-thread cache keeps only seven
// freed blocks of a size: beyond those, malloc and free take their slow
// path (over a quarter of the loop's CPU for 4 KiB versions in a profile
// here; a deeper cache took 5-8 % off the daemon's CPU per version,
// docs/small-versions.md, 2026-12-02). A deeper cache is a glibc tunable,
// read only when a program starts: the launching rank puts it in the
// daemon's environment (launcher.cpp). An iod started by hand runs with
// what its environment says (README, Configuration).
#include <optional>
#include <string>

namespace iofwd {

// Blocks of each size the daemon's threads keep for reuse.
inline constexpr unsigned daemon_tcache_count = 128;

// GLIBC_TUNABLES for the daemon, given the value it would inherit (null:
// none): the daemon's cache depth, then that value; nothing when it sets
// the cache depth already (the user's choice stands).
std::optional<std::string> daemon_glibc_tunables(const char* inherited);

}  // namespace iofwd
