#pragma once
// The Ceph RADOS backend: one pool; names as the layout gives them.
//
// An object is a head object, written last and whole (rados_write_full is
// atomic), that lists its data pieces: "<name>@<write id>.<n>", each at most
// 64 MiB (RADOS refuses objects over 128 MiB and single writes over 90 MB).
// Pieces are written with several asynchronous writes in flight; until the
// head exists nothing of the object is visible, and an abandoned object's
// pieces are removed.
//
// Location: "rados:POOL". The cluster: IOFWD_CEPH_CONF (ceph.conf path),
// IOFWD_CEPH_USER (default client.admin), IOFWD_CEPH_KEYRING;
// IOFWD_CEPH_OP_TIMEOUT seconds before a request to a dead OSD fails (15).
// The backend lives in a module of its own, libiofwd_rados.so beside
// libiofwd_internal.so, loaded the first time a rados: store is opened: a
// process that never opens one never loads librados.
#include <memory>
#include <string>
#include <system_error>

#include "store/backend.hpp"

namespace iofwd::store {

// Connects and opens the pool; an unreachable cluster, a wrong key or a
// missing pool is an error here, with a sentence in `why`. Loads the module
// first (once per process): a module that is missing, cannot load librados
// or belongs to another iofwd is errc::store_error, its path in `why`.
std::error_code open_rados(const std::string& pool, std::unique_ptr<backend>& out,
                           std::string& why);

}  // namespace iofwd::store

// What the module exports, looked up by name (rados_loader.cpp): the iofwd
// version it was built for, and open_rados's work. C names, C++ arguments:
// the module and its loader are built together, against one
// libiofwd_internal.so.
extern "C" {
extern const char iofwd_rados_module_version[];
void iofwd_rados_module_open(const std::string& pool,
                             std::unique_ptr<iofwd::store::backend>& out, std::string& why,
                             std::error_code& ec) noexcept;
}
