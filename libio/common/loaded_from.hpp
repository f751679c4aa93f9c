#pragma once
// Which file a piece of loaded code came from: how iofwd's libraries find
// what was installed with them (the client its iod, the store its rados
// module) instead of searching paths another install could shadow.
#include <string>

namespace iofwd {

// The real path (symlinks resolved) of the shared object or program that
// holds `address`, a function of it; empty when the loader cannot tell.
std::string loaded_from(const void* address);

}  // namespace iofwd
