#pragma once
// Disarms the fault seam (sys::inject) at the end of a scope, also when a
// REQUIRE leaves it early, so that a fault meant for one test never reaches
// the next.
#include "sys.hpp"

namespace test {

struct fault_guard {
    fault_guard() = default;
    fault_guard(const fault_guard&) = delete;
    fault_guard& operator=(const fault_guard&) = delete;
    ~fault_guard() { iofwd::sys::inject(std::nullopt); }
};

}  // namespace test
