/* An ordinary MPI-IO program, built without any iofwd header or library: the
 * shim tests run it with and without the shim preloaded and compare the files.
 *
 *   mpiio_app DIR [OUTSIDE_DIR]
 *
 * Writes DIR/data.bin through every write call the shim forwards (explicit
 * offsets, individual pointer, collective, nonblocking, large-count, a dense
 * etype view, a strided memory datatype, one whose pieces are out of order, a
 * strided file view) and through ones
 * it hands to MPI-IO (an external32 view, the shared pointer), rewrites a range, reads ranges
 * back before any sync with read_at, read, read_all and read_at_all (they
 * must hold what was written), checks the size, grows it with set_size,
 * syncs and closes. With OUTSIDE_DIR it writes OUTSIDE_DIR/other.bin too.
 * Exit status 0 only when every call succeeded and every read and size check
 * held. A failing call aborts the job, or with MPIIO_APP_KEEP_GOING set is
 * counted and the program goes on (its messages then surely reach stderr). */
#include <mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BIG (3 * 1024 * 1024 + 17) /* pulled by the daemon (above the eager limit) */
#define SMALL 4000                 /* carried inline */
#define CHECK(call)                                                                  \
    do {                                                                             \
        int rc_ = (call);                                                            \
        if (rc_ != MPI_SUCCESS) {                                                    \
            char msg_[MPI_MAX_ERROR_STRING];                                         \
            int len_ = 0;                                                            \
            MPI_Error_string(rc_, msg_, &len_);                                      \
            fprintf(stderr, "rank %d: %s failed: %s\n", rank, #call, msg_);          \
            ++failures;                                                              \
            if (!getenv("MPIIO_APP_KEEP_GOING"))                                     \
                MPI_Abort(MPI_COMM_WORLD, 3);                                        \
        }                                                                            \
    } while (0)

static int rank, ranks, failures;

static void fill(unsigned char* p, size_t n, unsigned seed)
{
    uint32_t x = seed * 2654435761u + 12345u;
    for (size_t i = 0; i < n; ++i) {
        x = x * 1103515245u + 12345u;
        p[i] = (unsigned char)(x >> 16);
    }
}

static void expect_same(const unsigned char* got, const unsigned char* want, int n,
                        const char* what)
{
    if (memcmp(got, want, n) != 0) {
        fprintf(stderr, "rank %d: %s: different bytes\n", rank, what);
        ++failures;
    }
}

static void expect_read(MPI_File fh, MPI_Offset at, const unsigned char* want, int n,
                        const char* what)
{
    unsigned char* got = malloc(n);
    MPI_Status st;
    int count = -1;
    CHECK(MPI_File_read_at(fh, at, got, n, MPI_BYTE, &st));
    MPI_Get_count(&st, MPI_BYTE, &count);
    if (count != n || memcmp(got, want, n) != 0) {
        fprintf(stderr, "rank %d: read back of %s at %lld: %d bytes, %s\n", rank, what,
                (long long)at, count, count == n ? "different bytes" : "short");
        ++failures;
    }
    free(got);
}

int main(int argc, char** argv)
{
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SINGLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    if (argc < 2) {
        if (rank == 0)
            fprintf(stderr, "usage: mpiio_app DIR [OUTSIDE_DIR]\n");
        MPI_Finalize();
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/data.bin", argv[1]);

    /* Each rank owns a region of `region` bytes; regions follow each other. */
    const MPI_Offset region = 2 * (MPI_Offset)BIG + 8 * SMALL + 4096 * 8;
    const MPI_Offset base = rank * region;
    unsigned char* big = malloc(BIG);
    unsigned char* small = malloc(SMALL);
    fill(big, BIG, 1000 + rank);
    fill(small, SMALL, 2000 + rank);

    MPI_File fh;
    CHECK(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh));
    MPI_Status st;
    MPI_Offset at = base;

    /* Explicit offsets, independent and collective. */
    CHECK(MPI_File_write_at(fh, at, big, BIG, MPI_BYTE, &st));
    at += BIG;
    const MPI_Offset small_at = at;
    CHECK(MPI_File_write_at_all(fh, at, small, SMALL, MPI_BYTE, &st));
    int count = -1;
    MPI_Get_count(&st, MPI_BYTE, &count);
    if (count != SMALL) {
        fprintf(stderr, "rank %d: write_at_all status says %d bytes, not %d\n", rank, count, SMALL);
        ++failures;
    }
    at += SMALL;

    /* Individual file pointer: seek, write, write_all; the pointer must move. */
    CHECK(MPI_File_seek(fh, at, MPI_SEEK_SET));
    CHECK(MPI_File_write(fh, small, SMALL, MPI_BYTE, &st));
    CHECK(MPI_File_write_all(fh, small + 7, SMALL - 7, MPI_BYTE, &st));
    MPI_Offset pos = 0;
    CHECK(MPI_File_get_position(fh, &pos));
    if (pos != at + 2 * SMALL - 7) {
        fprintf(stderr, "rank %d: file pointer at %lld, expected %lld\n", rank, (long long)pos,
                (long long)(at + 2 * SMALL - 7));
        ++failures;
    }
    at = pos;

    /* Nonblocking, then large-count. */
    MPI_Request req;
    CHECK(MPI_File_iwrite_at(fh, at, big, BIG, MPI_BYTE, &req));
    CHECK(MPI_Wait(&req, &st));
    MPI_Get_count(&st, MPI_BYTE, &count);
    if (count != BIG) {
        fprintf(stderr, "rank %d: iwrite_at completed %d bytes, not %d\n", rank, count, BIG);
        ++failures;
    }
    at += BIG;
    CHECK(MPI_File_write_at_c(fh, at, small, (MPI_Count)SMALL, MPI_BYTE, &st));
    at += SMALL;

    /* A strided memory datatype: every other int of 2*SMALL/4 ints (to MPI-IO). */
    MPI_Datatype strided;
    MPI_Type_vector(SMALL / 8, 1, 2, MPI_INT, &strided);
    MPI_Type_commit(&strided);
    CHECK(MPI_File_write_at(fh, at, small, 1, strided, &st));
    at += SMALL / 2;
    MPI_Type_free(&strided);

    /* Rewrite the start of the first big write: the later bytes must win. */
    CHECK(MPI_File_write_at(fh, base + 100, small, SMALL, MPI_BYTE, &st));
    memcpy(big + 100, small, SMALL);

    /* Read back before any sync: the shim must show every byte written. */
    expect_read(fh, base, big, BIG, "the first big write (with its rewrite)");
    fill(big, BIG, 1000 + rank);
    expect_read(fh, at - SMALL / 2 - SMALL - BIG, big, BIG, "the nonblocking write");

    /* The individual-pointer and collective reads see them as well. */
    unsigned char* got = malloc(SMALL);
    CHECK(MPI_File_seek(fh, small_at, MPI_SEEK_SET));
    CHECK(MPI_File_read(fh, got, SMALL, MPI_BYTE, &st));
    expect_same(got, small, SMALL, "MPI_File_read after seek");
    memset(got, 0, SMALL);
    CHECK(MPI_File_seek(fh, small_at, MPI_SEEK_SET));
    CHECK(MPI_File_read_all(fh, got, SMALL, MPI_BYTE, &st));
    expect_same(got, small, SMALL, "MPI_File_read_all");
    memset(got, 0, SMALL);
    CHECK(MPI_File_read_at_all(fh, small_at, got, SMALL, MPI_BYTE, &st));
    expect_same(got, small, SMALL, "MPI_File_read_at_all");
    free(got);

    /* A memory datatype without holes whose pieces are out of order: the
     * second half of `small` first, then the first half. */
    {
        int lens[2] = {SMALL / 2, SMALL / 2};
        MPI_Aint disps[2] = {SMALL / 2, 0};
        MPI_Datatype swapped;
        MPI_Type_create_hindexed(2, lens, disps, MPI_BYTE, &swapped);
        MPI_Type_commit(&swapped);
        CHECK(MPI_File_write_at(fh, at, small, 1, swapped, &st));
        MPI_Type_free(&swapped);
        at += SMALL;
    }

    /* A dense view of ints after the region so far: offsets count ints. */
    const MPI_Offset view_at = at + (4 - at % 4) % 4;
    CHECK(MPI_File_set_view(fh, view_at, MPI_INT, MPI_INT, "native", MPI_INFO_NULL));
    CHECK(MPI_File_write_at(fh, 10, small, SMALL / 4, MPI_INT, &st));
    /* A strided file view: every other block of 25 ints of the next 2*SMALL
     * bytes, then the blocks between them through the same view moved by one
     * block (a hole no rank fills would hold whatever MPI-IO's data sieving
     * leaves there). */
    MPI_Datatype every_other;
    MPI_Type_contiguous(25, MPI_INT, &every_other);
    MPI_Datatype tiled;
    MPI_Type_create_resized(every_other, 0, 200, &tiled);
    MPI_Type_commit(&tiled);
    const MPI_Offset strided_at = view_at + 40 + SMALL;
    CHECK(MPI_File_set_view(fh, strided_at, MPI_INT, tiled, "native", MPI_INFO_NULL));
    CHECK(MPI_File_write_at(fh, 0, small, SMALL / 8, MPI_INT, &st));
    CHECK(MPI_File_set_view(fh, strided_at + 100, MPI_INT, tiled, "native", MPI_INFO_NULL));
    CHECK(MPI_File_write_at(fh, 0, small + SMALL / 2, SMALL / 8, MPI_INT, &st));
    MPI_Type_free(&tiled);
    MPI_Type_free(&every_other);
    /* A view in the external32 representation (to MPI-IO: the shim does not
     * convert data). */
    const MPI_Offset external_at = strided_at + SMALL;
    if (external_at + SMALL > base + region) {
        fprintf(stderr, "rank %d: the views overrun the rank's region\n", rank);
        ++failures;
    }
    CHECK(MPI_File_set_view(fh, external_at, MPI_INT, MPI_INT, "external32", MPI_INFO_NULL));
    CHECK(MPI_File_write_at(fh, 0, small, SMALL / 4, MPI_INT, &st));
    CHECK(MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL));

    /* The shared file pointer (to MPI-IO), ordered by rank. */
    CHECK(MPI_File_seek_shared(fh, ranks * region, MPI_SEEK_SET));
    CHECK(MPI_File_write_ordered(fh, small, 64, MPI_BYTE, &st));

    /* Every rank's bytes are in before the size is read. */
    CHECK(MPI_File_sync(fh));
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(MPI_File_sync(fh));
    MPI_Offset size = 0;
    CHECK(MPI_File_get_size(fh, &size));
    if (size != ranks * region + 64 * ranks) {
        fprintf(stderr, "rank %d: file size %lld, expected %lld\n", rank, (long long)size,
                (long long)(ranks * region + 64 * ranks));
        ++failures;
    }
    /* Growing the file (collective): the new size is seen by everyone. */
    CHECK(MPI_File_set_size(fh, size + 4096));
    CHECK(MPI_File_get_size(fh, &size));
    if (size != ranks * region + 64 * ranks + 4096) {
        fprintf(stderr, "rank %d: after set_size the file has %lld bytes\n", rank,
                (long long)size);
        ++failures;
    }
    CHECK(MPI_File_close(&fh));

    if (argc > 2) {
        char other[4096];
        snprintf(other, sizeof other, "%s/other.bin", argv[2]);
        CHECK(MPI_File_open(MPI_COMM_WORLD, other, MPI_MODE_CREATE | MPI_MODE_WRONLY,
                            MPI_INFO_NULL, &fh));
        CHECK(MPI_File_write_at_all(fh, rank * (MPI_Offset)BIG, big, BIG, MPI_BYTE, &st));
        CHECK(MPI_File_close(&fh));
    }

    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("mpiio_app: %d ranks, %lld bytes each, %d failed checks\n", ranks,
               (long long)region, all);
    free(big);
    free(small);
    MPI_Finalize();
    return all == 0 ? 0 : 1;
}
