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
#include <memory>
#include <string>

#include "store/backend.hpp"

namespace iofwd::store {

// Connects and opens the pool; an unreachable cluster, a wrong key or a
// missing pool is an error here, with a sentence in `why`.
std::error_code open_rados(const std::string& pool, std::unique_ptr<backend>& out,
                           std::string& why);

}  // namespace iofwd::store
