#include "loaded_from.hpp"

#include <dlfcn.h>

#include <climits>
#include <cstdlib>

namespace iofwd {

std::string loaded_from(const void* address)
{
    Dl_info info{};
    if (::dladdr(address, &info) == 0 || !info.dli_fname || !*info.dli_fname)
        return {};
    char real[PATH_MAX];
    if (!::realpath(info.dli_fname, real))
        return {};
    return real;
}

}  // namespace iofwd
