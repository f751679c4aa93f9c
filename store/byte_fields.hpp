#pragma once
// Fixed-size fields of the store's binary records (journal.cpp's headers,
// pack.cpp's part headers and trailer), in the machine's byte order: the
// files are read back only on the node, or the kind of node, that wrote
// them. memcpy, so that no field needs to be aligned.
#include <cstddef>
#include <cstring>

namespace iofwd::store::fields {

template <typename T>
void put(std::byte* at, T v)
{
    std::memcpy(at, &v, sizeof v);
}

template <typename T>
T get(const std::byte* at)
{
    T v;
    std::memcpy(&v, at, sizeof v);
    return v;
}

}  // namespace iofwd::store::fields
