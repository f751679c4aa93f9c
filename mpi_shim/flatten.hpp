#pragma once
// An MPI datatype's type map as a list of pieces (byte displacement and
// length, in type map order, touching pieces merged), found with MPI's own
// type introspection (MPI_Type_get_envelope and MPI_Type_get_contents, down
// to the named types). Every constructor of MPI 4.0 is known: contiguous,
// (h)vector, (h)indexed, (h)indexed_block, struct, subarray, darray, resized,
// dup. The shim uses it for file views (file_view.hpp); the unit test checks
// it against MPI-IO's own placement of the bytes (tests/shim/test_flatten.cpp).
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "file_view.hpp"

namespace iofwd::shim {

struct flat_type {
    std::vector<block> pieces;
    std::int64_t size = 0;    // MPI_Type_size: the pieces' total
    std::int64_t lb = 0;      // MPI_Type_get_extent
    std::int64_t extent = 0;
};

// Pieces beyond which a type is not flattened (its list would take more
// memory than MPI-IO's own handling of it).
inline constexpr std::size_t max_pieces = std::size_t{1} << 20;

// False, with `why` in words, for a type it cannot flatten (a large-count
// constructor, more than `limit` pieces) or whose placement in a file view
// ROMIO does not take from its type map (a pair type such as MPI_SHORT_INT, a
// type resized to a lower bound other than 0): the caller then leaves the
// write to MPI-IO.
bool flatten(MPI_Datatype type, flat_type& out, std::string& why,
             std::size_t limit = max_pieces);

}  // namespace iofwd::shim
