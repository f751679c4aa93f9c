// open_rados (rados.hpp): loads the rados module the first time a rados:
// store is opened, and hands the work to it. The module is looked for beside
// the shared object this code is part of, libiofwd_internal.so, in the build
// tree and in an install alike, so a program never loads another iofwd's.
#include "store/rados.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cstring>

#include <fmt/format.h>

#include "errors.hpp"
#include "loaded_from.hpp"

namespace iofwd::store {
namespace {

using open_fn = decltype(&iofwd_rados_module_open);

struct rados_module {
    open_fn open = nullptr;
    std::string path;
    std::string error;  // why open is null, in words
};

std::string module_path()
{
    const std::string self = loaded_from(reinterpret_cast<const void*>(&open_rados));
    return self.empty() ? self : self.substr(0, self.rfind('/') + 1) + "libiofwd_rados.so";
}

rados_module load()
{
    rados_module m;
    m.path = module_path();
    if (m.path.empty()) {
        m.error = "cannot find the rados module: the directory of libiofwd_internal.so is unknown";
        return m;
    }
    if (::access(m.path.c_str(), F_OK) != 0) {
        m.error = fmt::format("iofwd's rados module is not installed: no {} (iofwd builds it "
                              "when librados-dev is installed)",
                              m.path);
        return m;
    }
    // Never unloaded: librados runs threads and registers exit handlers.
    void* h = ::dlopen(m.path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!h) {
        m.error = fmt::format("cannot load iofwd's rados module: {} (it needs Ceph's librados2)",
                              ::dlerror());
        return m;
    }
    const auto* version = static_cast<const char*>(::dlsym(h, "iofwd_rados_module_version"));
    auto* open = reinterpret_cast<open_fn>(::dlsym(h, "iofwd_rados_module_open"));
    if (!version || !open) {
        m.error = fmt::format("{} is not iofwd's rados module: it has no iofwd_rados_module_open",
                              m.path);
        return m;
    }
    if (std::strcmp(version, IOFWD_VERSION) != 0) {
        m.error = fmt::format("{} belongs to iofwd {}, this is iofwd {}: install iofwd whole",
                              m.path, version, IOFWD_VERSION);
        return m;
    }
    m.open = open;
    return m;
}

}  // namespace

std::error_code open_rados(const std::string& pool, std::unique_ptr<backend>& out,
                           std::string& why)
{
    static const rados_module module = load();  // once per process, thread-safe
    if (!module.open) {
        why = module.error;
        return make_error_code(errc::store_error);
    }
    std::error_code ec;
    module.open(pool, out, why, ec);
    return ec;
}

}  // namespace iofwd::store
