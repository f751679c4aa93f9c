// The shim's flattening of MPI datatypes (mpi_shim/flatten.hpp) and its
// file-view arithmetic (file_view.hpp) against MPI-IO itself: for each kind
// of filetype, MPI-IO writes a numbered stream through the view into a fresh
// file (this program is not run under the shim), the file is read back, and
// every byte must be where the shim's run list says, every other byte zero.
//   test_flatten DIR      (any number of ranks; each checks every type alone)
#include <fcntl.h>
#include <mpi.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "file_view.hpp"
#include "flatten.hpp"

using namespace iofwd::shim;

namespace {

int failures = 0;
int checked = 0;

void wrong(const std::string& name, const std::string& what)
{
    std::printf("FAILED: %s: %s\n", name.c_str(), what.c_str());
    ++failures;
}

// Writes `bytes` through the view (disp, etype, filetype) at `offset` etypes
// with MPI-IO, then compares the file with the shim's runs for the same write.
void check(const std::string& dir, const std::string& name, MPI_Offset disp, MPI_Datatype etype,
           MPI_Datatype filetype, MPI_Offset offset, std::int64_t bytes)
{
    ++checked;
    flat_type flat;
    std::string why;
    if (!flatten(filetype, flat, why))
        return wrong(name, "not flattened: " + why);
    int esize = 0;
    MPI_Type_size(etype, &esize);
    const file_view view(disp, esize, flat.pieces, flat.extent);

    // The stream: byte i is 1 + i % 251, never 0.
    std::vector<unsigned char> stream(static_cast<std::size_t>(bytes));
    for (std::size_t i = 0; i < stream.size(); ++i)
        stream[i] = static_cast<unsigned char>(1 + i % 251);

    // Where the shim puts it, in as many lists as it takes (small lists, to
    // cross list boundaries too).
    std::vector<unsigned char> expect;
    for (std::int64_t done = 0; done < bytes;) {
        std::vector<iofwd::proto::file_run> runs;
        const std::int64_t n = view.runs(offset * esize + done, bytes - done, runs, 7);
        if (n <= 0)
            return wrong(name, "the run list covers nothing");
        std::int64_t at = done;
        for (const auto& r : runs) {
            if (expect.size() < r.offset + r.length)
                expect.resize(r.offset + r.length, 0);
            std::memcpy(expect.data() + r.offset, stream.data() + at, r.length);
            at += static_cast<std::int64_t>(r.length);
        }
        if (at != done + n)
            return wrong(name, "the runs do not hold what the list says it covered");
        done += n;
    }

    // Where MPI-IO puts it.
    const std::string path = dir + "/" + name + ".bin";
    ::unlink(path.c_str());
    // ROMIO's data sieving would write back the holes between pieces too
    // (read-modify-write); without it MPI-IO writes exactly the pieces.
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "romio_ds_write", "disable");
    MPI_File fh;
    const int rc = MPI_File_open(MPI_COMM_SELF, path.c_str(), MPI_MODE_CREATE | MPI_MODE_WRONLY,
                                 info, &fh);
    MPI_Info_free(&info);
    if (rc != MPI_SUCCESS)
        return wrong(name, "MPI_File_open failed");
    MPI_File_set_view(fh, disp, etype, filetype, "native", MPI_INFO_NULL);
    MPI_File_write_at(fh, offset, stream.data(), static_cast<int>(bytes / esize), etype,
                      MPI_STATUS_IGNORE);
    MPI_File_close(&fh);
    std::vector<unsigned char> got(expect.size() + 1);
    const int fd = ::open(path.c_str(), O_RDONLY);
    const ssize_t n = fd < 0 ? -1 : ::pread(fd, got.data(), got.size(), 0);
    if (fd >= 0)
        ::close(fd);
    ::unlink(path.c_str());
    if (std::getenv("TEST_FLATTEN_VERBOSE"))
        for (const auto& p : flat.pieces)
            std::printf("%s: piece %lld+%lld (extent %lld)\n", name.c_str(),
                        static_cast<long long>(p.disp), static_cast<long long>(p.length),
                        static_cast<long long>(flat.extent));
    if (n != static_cast<ssize_t>(expect.size()))
        return wrong(name, "MPI-IO's file has " + std::to_string(n) + " bytes, the runs end at " +
                               std::to_string(expect.size()));
    got.resize(expect.size());
    for (std::size_t i = 0; i < got.size(); ++i)
        if (got[i] != expect[i])
            return wrong(name, "byte " + std::to_string(i) + " is " + std::to_string(got[i]) +
                                   " in MPI-IO's file, " + std::to_string(expect[i]) +
                                   " by the runs");
}

// 2.5 tiles of `filetype`, from one etype in.
void check_type(const std::string& dir, const std::string& name, MPI_Datatype filetype,
                MPI_Datatype etype = MPI_BYTE, MPI_Offset disp = 0)
{
    MPI_Type_commit(&filetype);
    int size = 0, esize = 0;
    MPI_Type_size(filetype, &size);
    MPI_Type_size(etype, &esize);
    const std::int64_t bytes = (2 * size + size / 2) / esize * esize;
    check(dir, name, disp, etype, filetype, 1, bytes);
    MPI_Type_free(&filetype);
}

// A type the shim must leave to MPI-IO, for the reason `why` names.
void refused(const std::string&, const std::string& name, MPI_Datatype type, const char* why)
{
    ++checked;
    MPI_Type_commit(&type);
    flat_type flat;
    std::string said;
    if (flatten(type, flat, said))
        wrong(name, "flattened, but MPI-IO places it otherwise");
    else if (said.find(why) == std::string::npos)
        wrong(name, "refused for the wrong reason: " + said);
    MPI_Type_free(&type);
}

}  // namespace

int main(int argc, char** argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const std::string dir = std::string(argc > 1 ? argv[1] : "/tmp") + "/r" + std::to_string(rank);
    ::mkdir(dir.c_str(), 0700);
    MPI_Datatype t, u;

    MPI_Type_vector(4, 3, 5, MPI_INT, &t);
    check_type(dir, "vector", t);
    MPI_Type_create_hvector(3, 2, 40, MPI_DOUBLE, &t);
    check_type(dir, "hvector", t, MPI_DOUBLE, 24);
    {
        int lens[] = {2, 1, 3}, disps[] = {0, 4, 9};
        MPI_Type_indexed(3, lens, disps, MPI_DOUBLE, &t);
        check_type(dir, "indexed", t, MPI_DOUBLE);
        MPI_Aint hdisps[] = {8, 40, 100};
        MPI_Type_create_hindexed(3, lens, hdisps, MPI_INT, &t);
        check_type(dir, "hindexed", t, MPI_BYTE, 7);
        MPI_Type_create_indexed_block(3, 2, disps, MPI_SHORT, &t);
        check_type(dir, "indexed_block", t);
        MPI_Type_create_hindexed_block(3, 2, hdisps, MPI_FLOAT, &t);
        check_type(dir, "hindexed_block", t);
    }
    {
        // A struct of two ints and a vector of doubles, then a gap.
        MPI_Type_vector(2, 1, 3, MPI_DOUBLE, &u);
        int lens[] = {2, 1};
        MPI_Aint disps[] = {0, 16};
        MPI_Datatype types[] = {MPI_INT, u};
        MPI_Datatype s;
        MPI_Type_create_struct(2, lens, disps, types, &s);
        MPI_Type_create_resized(s, 0, 64, &t);
        check_type(dir, "struct", t);
        MPI_Type_free(&s);
        MPI_Type_free(&u);
    }
    {
        // Resized with a lower bound: the pieces keep their places.
        MPI_Type_contiguous(3, MPI_INT, &u);
        MPI_Type_create_resized(u, 0, 20, &t);
        check_type(dir, "resized", t);
        MPI_Type_free(&u);
        // Its lower bound stays where the pieces start (MPI's own).
        MPI_Type_create_hindexed_block(1, 3, std::vector<MPI_Aint>{8}.data(), MPI_INT, &t);
        check_type(dir, "lower_bound", t);
        // ROMIO shifts the pieces of a type resized to a lower bound by that
        // bound, and does not keep the hole of a pair type: the shim leaves
        // both to MPI-IO.
        MPI_Type_create_hindexed_block(1, 3, std::vector<MPI_Aint>{8}.data(), MPI_INT, &u);
        MPI_Type_create_resized(u, 4, 28, &t);
        refused(dir, "resized_lb", t, "resized to lower bound 4");
        MPI_Type_free(&u);
    }
    {
        int sizes[] = {8, 12}, subsizes[] = {3, 5}, starts[] = {2, 4};
        MPI_Type_create_subarray(2, sizes, subsizes, starts, MPI_ORDER_C, MPI_DOUBLE, &t);
        check_type(dir, "subarray_c", t, MPI_DOUBLE, 16);
        int sizes3[] = {5, 4, 6}, subsizes3[] = {2, 3, 4}, starts3[] = {1, 0, 2};
        MPI_Type_create_subarray(3, sizes3, subsizes3, starts3, MPI_ORDER_FORTRAN, MPI_INT, &t);
        check_type(dir, "subarray_fortran", t, MPI_INT);
    }
    {
        // Every rank's share of a 2x2 grid: block by cyclic(2), C order;
        // block by block, Fortran order; cyclic by none on a 4x1 grid.
        int gsizes[] = {10, 9}, psizes[] = {2, 2};
        int distribs[] = {MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_CYCLIC};
        int dargs[] = {MPI_DISTRIBUTE_DFLT_DARG, 2};
        for (int r = 0; r < 4; ++r) {
            MPI_Type_create_darray(4, r, 2, gsizes, distribs, dargs, psizes, MPI_ORDER_C,
                                   MPI_DOUBLE, &t);
            check_type(dir, "darray_c_" + std::to_string(r), t, MPI_DOUBLE);
            int bb[] = {MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_BLOCK};
            int dflt[] = {MPI_DISTRIBUTE_DFLT_DARG, MPI_DISTRIBUTE_DFLT_DARG};
            MPI_Type_create_darray(4, r, 2, gsizes, bb, dflt, psizes, MPI_ORDER_FORTRAN, MPI_INT,
                                   &t);
            check_type(dir, "darray_fortran_" + std::to_string(r), t, MPI_INT);
            int cn[] = {MPI_DISTRIBUTE_CYCLIC, MPI_DISTRIBUTE_NONE};
            int grid[] = {4, 1};
            MPI_Type_create_darray(4, r, 2, gsizes, cn, dflt, grid, MPI_ORDER_C, MPI_FLOAT, &t);
            check_type(dir, "darray_cyclic_" + std::to_string(r), t);
        }
    }
    {
        // Nested: two of a vector, and a pair type with a hole in it.
        MPI_Type_vector(3, 1, 2, MPI_LONG, &u);
        MPI_Type_contiguous(2, u, &t);
        check_type(dir, "nested", t);
        MPI_Type_free(&u);
        MPI_Type_contiguous(3, MPI_SHORT_INT, &t);
        refused(dir, "pair_type", t, "pair type");
    }

    std::printf("test_flatten (rank %d): %d types checked against MPI-IO, %d wrong\n", rank,
                checked, failures);
    ::rmdir(dir.c_str());
    MPI_Finalize();
    return failures == 0 ? 0 : 1;
}
