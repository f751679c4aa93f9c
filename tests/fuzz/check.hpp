#pragma once
// The harnesses' assertion: an invariant that does not hold is a finding, so
// it says which one, with the values involved, and aborts; libFuzzer reports
// the abort as a crash and saves the input. Not assert(): a harness must check
// in every build type.
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#define FUZZ_CHECK(cond, ...)                                                          \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fmt::print(stderr, "fuzz invariant failed at {}:{}: {}\n  ", __FILE__, __LINE__, \
                       #cond);                                                         \
            fmt::print(stderr, __VA_ARGS__);                                           \
            std::fputc('\n', stderr);                                                  \
            std::abort();                                                              \
        }                                                                              \
    } while (0)
