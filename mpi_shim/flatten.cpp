#include "flatten.hpp"

#include <algorithm>
#include <cstddef>
#include <utility>

#include <fmt/format.h>

namespace iofwd::shim {
namespace {

using i64 = std::int64_t;

// Whether a type's pieces are one run filling its extent from 0 (then n of
// them in a row are one run too).
bool dense(const std::vector<block>& pieces, i64 extent)
{
    return pieces.size() == 1 && pieces[0].disp == 0 && pieces[0].length == extent;
}

// The indices a dimension of a subarray or darray covers: runs of them.
struct index_run {
    i64 first = 0;
    i64 count = 0;
};

class flattener {
public:
    flattener(std::size_t limit, std::string& why) : limit_(limit), why_(why) {}

    // `type`'s pieces, relative to its origin, appended to `out`.
    bool pieces(MPI_Datatype type, std::vector<block>& out)
    {
        int ni = 0, na = 0, nd = 0, combiner = 0;
        if (PMPI_Type_get_envelope(type, &ni, &na, &nd, &combiner) != MPI_SUCCESS)
            return fail("MPI_Type_get_envelope failed");
        if (combiner == MPI_COMBINER_NAMED || combiner == MPI_COMBINER_F90_REAL ||
            combiner == MPI_COMBINER_F90_COMPLEX || combiner == MPI_COMBINER_F90_INTEGER)
            return named(type, out);
        std::vector<int> ints(static_cast<std::size_t>(ni));
        std::vector<MPI_Aint> addrs(static_cast<std::size_t>(na));
        std::vector<MPI_Datatype> types(static_cast<std::size_t>(nd));
        if (PMPI_Type_get_contents(type, ni, na, nd, ints.data(), addrs.data(), types.data()) !=
            MPI_SUCCESS)
            return fail("MPI_Type_get_contents failed");
        const bool ok = constructed(combiner, ints, addrs, types, out);
        // The derived types get_contents handed out are ours to free (MPICH
        // counts a reference for the F90 ones too, which MPI calls predefined;
        // only named types are left alone).
        for (MPI_Datatype t : types) {
            int n1 = 0, n2 = 0, n3 = 0, c = 0;
            if (PMPI_Type_get_envelope(t, &n1, &n2, &n3, &c) == MPI_SUCCESS &&
                c != MPI_COMBINER_NAMED)
                PMPI_Type_free(&t);
        }
        return ok;
    }

private:
    bool fail(std::string why)
    {
        if (why_.empty())
            why_ = std::move(why);
        return false;
    }

    bool add(std::vector<block>& out, i64 disp, i64 length)
    {
        if (length <= 0)
            return true;
        if (!out.empty() && out.back().disp + out.back().length == disp) {
            out.back().length += length;
            return true;
        }
        if (out.size() >= limit_)
            return fail(fmt::format("it has more than {} pieces", limit_));
        out.push_back({disp, length});
        return true;
    }

    // `n` elements of a type with pieces `sub` and extent `extent`, one after
    // the other from `at`.
    bool elements(std::vector<block>& out, const std::vector<block>& sub, i64 extent, i64 at,
                  i64 n)
    {
        if (n <= 0 || sub.empty())  // nothing to place (an empty type)
            return true;
        if (dense(sub, extent))
            return add(out, at, n * extent);
        for (i64 i = 0; i < n; ++i)
            for (const auto& p : sub)
                if (!add(out, at + i * extent + p.disp, p.length))
                    return false;
        return true;
    }

    // The pieces and extent of a type inside a constructor.
    bool child(MPI_Datatype type, std::vector<block>& sub, i64& extent)
    {
        MPI_Count lb = 0, ext = 0;
        if (PMPI_Type_get_extent_x(type, &lb, &ext) != MPI_SUCCESS)
            return fail("MPI_Type_get_extent_x failed");
        extent = static_cast<i64>(ext);
        return pieces(type, sub);
    }

    bool named(MPI_Datatype type, std::vector<block>& out)
    {
        int size = 0;
        MPI_Aint true_lb = 0, true_extent = 0;
        if (PMPI_Type_size(type, &size) != MPI_SUCCESS ||
            PMPI_Type_get_true_extent(type, &true_lb, &true_extent) != MPI_SUCCESS)
            return fail("MPI_Type_size failed on a named type");
        if (size == true_extent)
            return add(out, true_lb, size);
        // MPI's pair types (MPI_SHORT_INT ...) have a hole, which ROMIO's
        // file views do not keep: only MPI-IO can place them as it does.
        return fail(fmt::format("a named type of {} bytes spread over {} (a pair type)", size,
                                true_extent));
    }

    // Subarrays and darrays: the elements whose index in each dimension is in
    // that dimension's runs, in memory order. Dimensions are given slowest first.
    bool array(std::vector<block>& out, const std::vector<block>& sub, i64 extent,
               const std::vector<i64>& sizes, const std::vector<std::vector<index_run>>& runs)
    {
        const std::size_t n = sizes.size();
        std::vector<i64> stride(n);
        i64 s = extent;
        for (std::size_t d = n; d-- > 0;) {
            stride[d] = s;
            s *= sizes[d];
        }
        // Depth-first over the slower dimensions; the fastest emits its runs.
        auto walk = [&](auto& self, std::size_t d, i64 at) -> bool {
            for (const auto& r : runs[d]) {
                if (d + 1 == n) {
                    if (!elements(out, sub, extent, at + r.first * stride[d], r.count))
                        return false;
                    continue;
                }
                for (i64 i = r.first; i < r.first + r.count; ++i)
                    if (!self(self, d + 1, at + i * stride[d]))
                        return false;
            }
            return true;
        };
        return n == 0 || walk(walk, 0, 0);
    }

    bool subarray(const std::vector<int>& ints, MPI_Datatype old, std::vector<block>& out)
    {
        const int n = ints[0];
        std::vector<i64> sizes;
        std::vector<std::vector<index_run>> runs;
        for (int d = 0; d < n; ++d) {
            sizes.push_back(ints[1 + d]);
            runs.push_back({{ints[1 + 2 * n + d], ints[1 + n + d]}});
        }
        if (ints[1 + 3 * n] == MPI_ORDER_FORTRAN) {  // the first dimension is the fastest
            std::reverse(sizes.begin(), sizes.end());
            std::reverse(runs.begin(), runs.end());
        }
        std::vector<block> sub;
        i64 extent = 0;
        return child(old, sub, extent) && array(out, sub, extent, sizes, runs);
    }

    bool darray(const std::vector<int>& ints, MPI_Datatype old, std::vector<block>& out)
    {
        const int rank = ints[1], n = ints[2];
        const int* gsizes = &ints[3];
        const int* distribs = &ints[3 + n];
        const int* dargs = &ints[3 + 2 * n];
        const int* psizes = &ints[3 + 3 * n];
        const int order = ints[3 + 4 * n];
        // This process's place in the grid, which is row-major whatever `order` says.
        std::vector<i64> coords(static_cast<std::size_t>(n));
        for (int d = n - 1, r = rank; d >= 0; --d) {
            coords[static_cast<std::size_t>(d)] = r % psizes[d];
            r /= psizes[d];
        }
        std::vector<i64> sizes;
        std::vector<std::vector<index_run>> runs;
        for (int d = 0; d < n; ++d) {
            const i64 g = gsizes[d], p = psizes[d], c = coords[static_cast<std::size_t>(d)];
            std::vector<index_run> mine;
            if (distribs[d] == MPI_DISTRIBUTE_NONE) {
                mine.push_back({0, g});
            } else if (distribs[d] == MPI_DISTRIBUTE_BLOCK) {
                const i64 b = dargs[d] == MPI_DISTRIBUTE_DFLT_DARG ? (g + p - 1) / p : dargs[d];
                if (c * b < g)
                    mine.push_back({c * b, std::min(b, g - c * b)});
            } else if (distribs[d] == MPI_DISTRIBUTE_CYCLIC) {
                const i64 b = dargs[d] == MPI_DISTRIBUTE_DFLT_DARG ? 1 : dargs[d];
                for (i64 first = c * b; first < g; first += p * b)
                    mine.push_back({first, std::min(b, g - first)});
            } else {
                return fail(fmt::format("a darray distribution it does not know ({})",
                                        distribs[d]));
            }
            sizes.push_back(g);
            runs.push_back(std::move(mine));
        }
        if (order == MPI_ORDER_FORTRAN) {
            std::reverse(sizes.begin(), sizes.end());
            std::reverse(runs.begin(), runs.end());
        }
        std::vector<block> sub;
        i64 extent = 0;
        return child(old, sub, extent) && array(out, sub, extent, sizes, runs);
    }

    bool constructed(int combiner, const std::vector<int>& ints,
                     const std::vector<MPI_Aint>& addrs, const std::vector<MPI_Datatype>& types,
                     std::vector<block>& out)
    {
        std::vector<block> sub;
        i64 extent = 0;
        switch (combiner) {
        case MPI_COMBINER_DUP:
            return pieces(types[0], out);
        case MPI_COMBINER_RESIZED:
            // The same type map; only the bounds differ. ROMIO places the
            // pieces of a type resized to a lower bound other than 0 shifted
            // by that bound: MPI-IO keeps those.
            if (addrs[0] != 0)
                return fail(fmt::format("a type resized to lower bound {}", addrs[0]));
            return pieces(types[0], out);
        case MPI_COMBINER_CONTIGUOUS:
            return child(types[0], sub, extent) && elements(out, sub, extent, 0, ints[0]);
        case MPI_COMBINER_VECTOR:
        case MPI_COMBINER_HVECTOR: {
            if (!child(types[0], sub, extent))
                return false;
            const i64 stride = combiner == MPI_COMBINER_VECTOR ? i64{ints[2]} * extent : addrs[0];
            for (i64 i = 0; i < ints[0]; ++i)
                if (!elements(out, sub, extent, i * stride, ints[1]))
                    return false;
            return true;
        }
        case MPI_COMBINER_INDEXED:
        case MPI_COMBINER_HINDEXED: {
            if (!child(types[0], sub, extent))
                return false;
            const int count = ints[0];
            for (int i = 0; i < count; ++i) {
                const i64 at = combiner == MPI_COMBINER_INDEXED ? i64{ints[1 + count + i]} * extent
                                                                : addrs[static_cast<std::size_t>(i)];
                if (!elements(out, sub, extent, at, ints[1 + i]))
                    return false;
            }
            return true;
        }
        case MPI_COMBINER_INDEXED_BLOCK:
        case MPI_COMBINER_HINDEXED_BLOCK: {
            if (!child(types[0], sub, extent))
                return false;
            const int count = ints[0];
            for (int i = 0; i < count; ++i) {
                const i64 at = combiner == MPI_COMBINER_INDEXED_BLOCK
                                   ? i64{ints[2 + i]} * extent
                                   : addrs[static_cast<std::size_t>(i)];
                if (!elements(out, sub, extent, at, ints[1]))
                    return false;
            }
            return true;
        }
        case MPI_COMBINER_STRUCT: {
            const int count = ints[0];
            for (int i = 0; i < count; ++i) {
                sub.clear();
                if (!child(types[static_cast<std::size_t>(i)], sub, extent) ||
                    !elements(out, sub, extent, addrs[static_cast<std::size_t>(i)], ints[1 + i]))
                    return false;
            }
            return true;
        }
        case MPI_COMBINER_SUBARRAY:
            return subarray(ints, types[0], out);
        case MPI_COMBINER_DARRAY:
            return darray(ints, types[0], out);
        default:
            return fail(fmt::format("a datatype constructor it does not know (combiner {})",
                                    combiner));
        }
    }

    std::size_t limit_;
    std::string& why_;
};

}  // namespace

bool flatten(MPI_Datatype type, flat_type& out, std::string& why, std::size_t limit)
{
    out = {};
    why.clear();
    MPI_Count size = 0, lb = 0, extent = 0;
    if (PMPI_Type_size_x(type, &size) != MPI_SUCCESS ||
        PMPI_Type_get_extent_x(type, &lb, &extent) != MPI_SUCCESS) {
        why = "its size or extent cannot be read";
        return false;
    }
    flattener f(limit, why);
    if (!f.pieces(type, out.pieces))
        return false;
    i64 total = 0;
    for (const auto& p : out.pieces)
        total += p.length;
    if (total != size) {
        // A constructor read wrongly must never misplace bytes: MPI-IO then.
        why = fmt::format("its pieces hold {} bytes, not its size of {}", total, size);
        return false;
    }
    out.size = size;
    out.lb = lb;
    out.extent = extent;
    return true;
}

}  // namespace iofwd::shim
