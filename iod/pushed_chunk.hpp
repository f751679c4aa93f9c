#pragma once
// A chunk a rank pushed, as UCX holds it for the daemon until it is received
// or given back: its descriptor, and the puller it came in on (nullptr: the
// loop's own worker), the only worker that may receive it or give it back.
#include <cstdint>

namespace iofwd::ucx {
class worker;
}

namespace iofwd::iod {

class puller;
class worker_driver;

struct pushed_chunk {
    puller* via = nullptr;
    void* desc = nullptr;
};

// Gives pushed chunk `c` of session `sender` back unread, on its worker,
// and has that worker progressed: UCX answers the rank's send only then
// (puller.cpp).
void give_back(pushed_chunk c, ucx::worker& loop_worker, worker_driver& loop_driver,
               std::uint64_t sender);

}  // namespace iofwd::iod
