/* An ordinary MPI-IO program, built without any iofwd header or library,
 * that writes through every kind of file view: the shim tests run it with
 * and without the shim and compare the files byte for byte.
 *
 *   views_app DIR
 *
 * For each kind of filetype (vector, indexed, hindexed, struct, resized,
 * subarray, darray, and one of 4-byte pieces) every rank sets a view whose filetype holds its share of
 * a tile of ints (the ranks' shares make up whole tiles, so the file has no
 * holes), with MPI_INT as the etype and a displacement, and writes three
 * tiles through it with every form of write:
 *   tile 0  MPI_File_write_at_all (explicit offset, collective), or for
 *           every other kind the split collective MPI_File_write_at_all_begin
 *           and _end;
 *   tile 1  MPI_File_seek + MPI_File_write_all (individual pointer), then a
 *           rewrite of its first half with MPI_File_write_at, twice (the
 *           later bytes must win), the second time from a strided memory
 *           datatype (every other int of a buffer);
 *   tile 2  MPI_File_iwrite_at (nonblocking) for its first half,
 *           MPI_File_write_c (large-count form, individual pointer) for the
 *           second;
 * plus a write of zero ints, and one at a negative offset, which must fail
 * with MPI_ERR_ARG. The individual file pointer must stand where
 * MPI-IO puts it after each write. Then each rank reads its three tiles back
 * through the view and checks them. DIR/<kind>.bin holds each result.
 * Exit status 0 only when every call succeeded and every check held; rank 0
 * prints "views_app: N ranks, K kinds, F failed checks". */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, ranks, failures;

#define B 16 /* ints per block: runs of 64 bytes */

#define CHECK(call)                                                                \
    do {                                                                           \
        int rc_ = (call);                                                          \
        if (rc_ != MPI_SUCCESS) {                                                  \
            char msg_[MPI_MAX_ERROR_STRING];                                       \
            int len_ = 0;                                                          \
            MPI_Error_string(rc_, msg_, &len_);                                    \
            fprintf(stderr, "rank %d: %s failed: %s\n", rank, #call, msg_);        \
            MPI_Abort(MPI_COMM_WORLD, 2);                                          \
        }                                                                          \
    } while (0)

/* This rank's filetype of kind `kind` (committed), with the view's
 * displacement in bytes; NULL name when there are no more kinds. */
static const char* filetype_of(int kind, MPI_Datatype* type, MPI_Offset* disp)
{
    MPI_Datatype t;
    *disp = 0;
    switch (kind) {
    case 0: {
        /* 3 blocks of B ints, every B*ranks ints, from int B*rank on. */
        MPI_Type_vector(3, B, B * ranks, MPI_INT, &t);
        MPI_Type_create_resized(t, 0, (MPI_Aint)(3 * B * ranks * sizeof(int)), type);
        MPI_Type_free(&t);
        *disp = B * rank * (MPI_Offset)sizeof(int);
        break;
    }
    case 1: {
        /* Blocks of B, 3B and 2B ints in three segments of the tile. */
        int lens[3] = {B, 3 * B, 2 * B};
        int at[3] = {B * rank, B * ranks + 3 * B * rank, 4 * B * ranks + 2 * B * rank};
        MPI_Type_indexed(3, lens, at, MPI_INT, &t);
        MPI_Type_create_resized(t, 0, (MPI_Aint)(6 * B * ranks * sizeof(int)), type);
        MPI_Type_free(&t);
        *disp = 64;
        break;
    }
    case 2: {
        /* Two blocks of B ints at byte displacements. */
        int lens[2] = {B, B};
        MPI_Aint at[2] = {(MPI_Aint)(rank * B * sizeof(int)),
                          (MPI_Aint)((ranks + rank) * B * sizeof(int))};
        MPI_Type_create_hindexed(2, lens, at, MPI_INT, &t);
        MPI_Type_create_resized(t, 0, (MPI_Aint)(2 * B * ranks * sizeof(int)), type);
        MPI_Type_free(&t);
        break;
    }
    case 3: {
        /* A struct: B ints, then a contiguous block of B ints further on. */
        MPI_Datatype block;
        MPI_Type_contiguous(B, MPI_INT, &block);
        int lens[2] = {B, 1};
        MPI_Aint at[2] = {(MPI_Aint)(rank * B * sizeof(int)),
                          (MPI_Aint)((ranks + rank) * B * sizeof(int))};
        MPI_Datatype types[2] = {MPI_INT, block};
        MPI_Type_create_struct(2, lens, at, types, &t);
        MPI_Type_create_resized(t, 0, (MPI_Aint)(2 * B * ranks * sizeof(int)), type);
        MPI_Type_free(&t);
        MPI_Type_free(&block);
        *disp = 4096;
        break;
    }
    case 4: {
        /* Resized: B ints in each B*ranks, the view displaced to the rank's. */
        MPI_Type_contiguous(B, MPI_INT, &t);
        MPI_Type_create_resized(t, 0, (MPI_Aint)(B * ranks * sizeof(int)), type);
        MPI_Type_free(&t);
        *disp = B * rank * (MPI_Offset)sizeof(int);
        break;
    }
    case 5: {
        /* The rank's B columns of an 8 x B*ranks array (C order). */
        int sizes[2] = {8, B * ranks}, subsizes[2] = {8, B}, starts[2] = {0, B * rank};
        MPI_Type_create_subarray(2, sizes, subsizes, starts, MPI_ORDER_C, MPI_INT, type);
        break;
    }
    case 6: {
        /* Blocks of B columns dealt round-robin over the ranks, rows whole. */
        int gsizes[2] = {8, 3 * B * ranks}, psizes[2] = {1, ranks};
        int distribs[2] = {MPI_DISTRIBUTE_NONE, MPI_DISTRIBUTE_CYCLIC};
        int dargs[2] = {MPI_DISTRIBUTE_DFLT_DARG, B};
        MPI_Type_create_darray(ranks, rank, 2, gsizes, distribs, dargs, psizes, MPI_ORDER_C,
                               MPI_INT, type);
        *disp = 12;
        break;
    }
    case 7: {
        /* Tiny pieces: every ranks-th int. Runs of 4 bytes are MPI-IO's to
         * write (its data sieving serves them better); the shim says so. */
        MPI_Type_vector(2 * B, 1, ranks, MPI_INT, &t);
        MPI_Type_create_resized(t, 0, (MPI_Aint)(2 * B * ranks * sizeof(int)), type);
        MPI_Type_free(&t);
        *disp = rank * (MPI_Offset)sizeof(int);
        break;
    }
    default:
        return NULL;
    }
    MPI_Type_commit(type);
    static const char* names[] = {"vector", "indexed", "hindexed", "struct",
                                  "resized", "subarray", "darray", "tiny"};
    return names[kind];
}

static void expect_position(MPI_File fh, MPI_Offset want, const char* after, const char* kind)
{
    MPI_Offset at = -1;
    CHECK(MPI_File_get_position(fh, &at));
    if (at != want) {
        fprintf(stderr, "rank %d: %s: after %s the file pointer is %lld, not %lld\n", rank, kind,
                after, (long long)at, (long long)want);
        ++failures;
    }
}

static void write_kind(const char* dir, const char* kind, int split, MPI_Datatype filetype,
                       MPI_Offset disp)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.bin", dir, kind);
    int size = 0;
    MPI_Type_size(filetype, &size);
    const int n = size / (int)sizeof(int); /* ints of one tile that are this rank's */
    int* values = malloc(3 * n * sizeof(int));
    int* rewrite = malloc(2 * n * sizeof(int)); /* every other one is written */
    for (int i = 0; i < 3 * n; ++i)
        values[i] = rank * 1000000 + i;
    for (int i = 0; i < 2 * n; ++i)
        rewrite[i] = -(rank * 1000000 + i);

    MPI_File fh;
    MPI_Status st;
    MPI_Request req;
    CHECK(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL,
                        &fh));
    CHECK(MPI_File_set_view(fh, disp, MPI_INT, filetype, "native", MPI_INFO_NULL));

    int count = -1;
    if (split) {
        CHECK(MPI_File_write_at_all_begin(fh, 0, values, n, MPI_INT));
        CHECK(MPI_File_write_at_all_end(fh, values, &st));
    } else {
        CHECK(MPI_File_write_at_all(fh, 0, values, n, MPI_INT, &st));
    }
    MPI_Get_count(&st, MPI_INT, &count);
    if (count != n) {
        fprintf(stderr, "rank %d: %s: the first write's status says %d ints, not %d\n", rank,
                kind, count, n);
        ++failures;
    }
    CHECK(MPI_File_seek(fh, n, MPI_SEEK_SET));
    CHECK(MPI_File_write_all(fh, values + n, n, MPI_INT, &st));
    expect_position(fh, 2 * n, "write_all", kind);
    /* The first half of tile 1 again, twice: the second one's ints stay. */
    CHECK(MPI_File_write_at(fh, n, values, n / 2, MPI_INT, &st));
    MPI_Datatype every_other;
    MPI_Type_vector(n / 2, 1, 2, MPI_INT, &every_other);
    MPI_Type_commit(&every_other);
    CHECK(MPI_File_write_at(fh, n, rewrite, 1, every_other, &st));
    MPI_Type_free(&every_other);
    expect_position(fh, 2 * n, "write_at (which leaves it alone)", kind);
    /* Tile 2: nonblocking first half, large-count second half. */
    CHECK(MPI_File_iwrite_at(fh, 2 * n, values + 2 * n, n / 2, MPI_INT, &req));
    CHECK(MPI_Wait(&req, &st));
    MPI_Get_count(&st, MPI_INT, &count);
    if (count != n / 2) {
        fprintf(stderr, "rank %d: %s: iwrite_at completed %d ints, not %d\n", rank, kind, count,
                n / 2);
        ++failures;
    }
    CHECK(MPI_File_seek(fh, 2 * n + n / 2, MPI_SEEK_SET));
    CHECK(MPI_File_write_c(fh, values + 2 * n + n / 2, (MPI_Count)(n - n / 2), MPI_INT, &st));
    expect_position(fh, 3 * n, "write_c", kind);
    CHECK(MPI_File_write_all(fh, values, 0, MPI_INT, &st));
    expect_position(fh, 3 * n, "a write of nothing", kind);
    int rc = MPI_File_write_at(fh, -1, values, 1, MPI_INT, &st), cls = -1;
    MPI_Error_class(rc, &cls);
    if (cls != MPI_ERR_ARG) {
        fprintf(stderr, "rank %d: %s: a write at offset -1 returned class %d, not MPI_ERR_ARG\n",
                rank, kind, cls);
        ++failures;
    }

    /* Read back through the view once every rank's writes are in. */
    CHECK(MPI_File_sync(fh));
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(MPI_File_sync(fh));
    int* got = malloc(3 * n * sizeof(int));
    CHECK(MPI_File_read_at_all(fh, 0, got, 3 * n, MPI_INT, &st));
    for (int i = 0; i < 3 * n; ++i) {
        const int want = (i >= n && i < n + n / 2) ? rewrite[2 * (i - n)] : values[i];
        if (got[i] != want) {
            fprintf(stderr, "rank %d: %s: int %d of the view reads %d, not %d\n", rank, kind, i,
                    got[i], want);
            ++failures;
            break;
        }
    }
    CHECK(MPI_File_close(&fh));
    free(got);
    free(rewrite);
    free(values);
}

int main(int argc, char** argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    if (argc < 2) {
        if (rank == 0)
            fprintf(stderr, "usage: views_app DIR\n");
        MPI_Finalize();
        return 2;
    }
    int kinds = 0;
    for (;; ++kinds) {
        MPI_Datatype filetype;
        MPI_Offset disp = 0;
        const char* kind = filetype_of(kinds, &filetype, &disp);
        if (!kind)
            break;
        write_kind(argv[1], kind, kinds % 2, filetype, disp);
        MPI_Type_free(&filetype);
    }
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("views_app: %d ranks, %d kinds, %d failed checks\n", ranks, kinds, all);
    MPI_Finalize();
    return all == 0 ? 0 : 1;
}
