/* An ordinary parallel HDF5 program (Debian's libhdf5-mpich), built without
 * any iofwd header or library, for the shim tests: chunked, strided and
 * compressed datasets, which reach MPI-IO as other requests than hdf5_app's.
 *
 *   hdf5_chunked_app FILE
 *
 * Writes three 2-D datasets of doubles, each value a function of its global
 * (i, j) and the dataset:
 *   "chunked"     NR x 16*ranks in 16 x 24 chunks (so chunks straddle ranks
 *                 and the last column of chunks may be partial; 16 x 16 with
 *                 one rank), each rank writing its 16 columns with a
 *                 collective transfer: its file selection is strided, one
 *                 run per row;
 *   "strided"     contiguous, NR rows per rank, each rank writing its rows
 *                 with an independent transfer from a memory buffer twice as
 *                 wide of which a strided hyperslab selects every other
 *                 column (the others hold a value that must not reach the
 *                 file);
 *   "compressed"  as "chunked" but in 16 x 16 chunks (one rank's each) with
 *                 deflate, written collectively. An HDF5 that cannot write
 *                 filtered datasets in parallel is found out at run time:
 *                 rank 0 prints "compression: not supported by this HDF5
 *                 (REASON)", the dataset is unlinked and the rest goes on;
 *                 otherwise it prints "compression: written".
 * plus an attribute on the root group. Then it closes the file, reopens it
 * read-only and every rank reads every dataset and the attribute back whole;
 * rank 0 prints how many values were wrong (exit status 1 if any).
 * Object times are not recorded, so two runs make identical bytes. A failing
 * HDF5 or MPI call aborts the job (no rank is left waiting in a collective). */
#include <hdf5.h>
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NR 64     /* rows of "chunked" and "compressed"; per rank of "strided" */
#define NC 16     /* columns per rank of "chunked" and "compressed" */
#define SC 32     /* columns of "strided" (its memory buffer has 2 * SC) */
#define HOLE -1.0 /* the unselected memory columns of "strided" */

#define MUST(x)                                                     \
    do {                                                               \
        if ((x) < 0) {                                                 \
            fprintf(stderr, "rank %d: %s failed\n", rank, #x);         \
            MPI_Abort(MPI_COMM_WORLD, 3);                              \
        }                                                              \
    } while (0)
#define MPI_MUST(x)                                                 \
    do {                                                               \
        if ((x) != MPI_SUCCESS) {                                      \
            fprintf(stderr, "rank %d: %s failed\n", rank, #x);         \
            MPI_Abort(MPI_COMM_WORLD, 3);                              \
        }                                                              \
    } while (0)

static int rank, ranks;

/* The value at global (i, j) of dataset d (0 chunked, 1 strided, 2 compressed). */
static double value(int d, hsize_t i, hsize_t j)
{
    return d * 1e6 + (double)i * 1e3 + (double)j + 0.25;
}

/* The innermost message of the current HDF5 error stack, as the reason. */
static herr_t take_innermost(unsigned n, const H5E_error2_t* e, void* out)
{
    if (n == 0 && e->desc) {
        snprintf((char*)out, 256, "%s: %s", e->func_name, e->desc);
        ((char*)out)[strcspn((char*)out, "\n")] = '\0'; /* one line */
    }
    return 0;
}

static void reason_from_stack(char* reason)
{
    hid_t stack = H5Eget_current_stack();
    if (stack < 0 || H5Ewalk2(stack, H5E_WALK_UPWARD, take_innermost, reason) < 0)
        snprintf(reason, 256, "no HDF5 error message");
    if (stack >= 0)
        H5Eclose_stack(stack);
}

/* Writes "compressed"; returns 1 if it was written, or 0 with the reason set
 * (the same on every rank). */
static int write_compressed(hid_t file, hid_t space, hid_t dcpl_plain, hid_t mspace,
                            hid_t fspace, hid_t coll, const double* buf, char* reason)
{
    int ok = 1;
    strcpy(reason, "");
    if (H5Zfilter_avail(H5Z_FILTER_DEFLATE) <= 0) {
        snprintf(reason, 256, "the deflate filter is not available");
        return 0;
    }
    hid_t dcpl = H5Pcopy(dcpl_plain);
    MUST(dcpl);
    hsize_t chunk[2] = {16, 16};
    MUST(H5Pset_chunk(dcpl, 2, chunk));
    MUST(H5Pset_deflate(dcpl, 6));

    /* Quiet: a refusal is an answer here, not an error to print. */
    H5E_auto2_t func;
    void* data;
    MUST(H5Eget_auto2(H5E_DEFAULT, &func, &data));
    MUST(H5Eset_auto2(H5E_DEFAULT, NULL, NULL));
    hid_t dset = H5Dcreate2(file, "compressed", H5T_NATIVE_DOUBLE, space, H5P_DEFAULT, dcpl,
                            H5P_DEFAULT);
    if (dset < 0) {
        reason_from_stack(reason);
        ok = 0;
    }
    /* H5Dcreate is collective: every rank must agree it made the dataset. */
    int created = ok, all_created = 0, any_created = 0;
    MPI_MUST(MPI_Allreduce(&created, &all_created, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    MPI_MUST(MPI_Allreduce(&created, &any_created, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    if (all_created != any_created) {
        fprintf(stderr, "rank %d: H5Dcreate2(compressed) failed on some ranks only\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    if (all_created) {
        if (H5Dwrite(dset, H5T_NATIVE_DOUBLE, mspace, fspace, coll, buf) < 0) {
            reason_from_stack(reason);
            ok = 0;
        }
        int all = 0;
        MPI_MUST(MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
        if (!all && ok)
            snprintf(reason, 256, "H5Dwrite failed on another rank");
        ok = all;
        MUST(H5Dclose(dset));
        if (!ok)
            MUST(H5Ldelete(file, "compressed", H5P_DEFAULT));
    }
    MUST(H5Eset_auto2(H5E_DEFAULT, func, data));
    MUST(H5Pclose(dcpl));
    return ok;
}

/* Reads dataset NAME whole with transfer XFER and counts the values that
 * differ from value(d, i, j); -1 if there is no such dataset. */
static int check(hid_t file, const char* name, int d, hid_t xfer)
{
    if (H5Lexists(file, name, H5P_DEFAULT) <= 0)
        return -1;
    hid_t dset = H5Dopen2(file, name, H5P_DEFAULT);
    MUST(dset);
    hid_t space = H5Dget_space(dset);
    MUST(space);
    hsize_t dims[2];
    MUST(H5Sget_simple_extent_dims(space, dims, NULL));
    double* back = malloc(sizeof(double) * dims[0] * dims[1]);
    MUST(H5Dread(dset, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, xfer, back));
    int bad = 0;
    for (hsize_t i = 0; i < dims[0]; ++i)
        for (hsize_t j = 0; j < dims[1]; ++j)
            bad += back[i * dims[1] + j] != value(d, i, j);
    if (bad)
        fprintf(stderr, "rank %d: %s: %d values read back differ\n", rank, name, bad);
    free(back);
    MUST(H5Sclose(space));
    MUST(H5Dclose(dset));
    return bad;
}

int main(int argc, char** argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    if (argc < 2) {
        fprintf(stderr, "usage: hdf5_chunked_app FILE\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }

    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    MUST(H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL));
    hid_t file = H5Fcreate(argv[1], H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    MUST(file);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    MUST(H5Pset_obj_track_times(dcpl, 0));
    hid_t coll = H5Pcreate(H5P_DATASET_XFER);
    MUST(H5Pset_dxpl_mpio(coll, H5FD_MPIO_COLLECTIVE));
    hid_t indep = H5Pcreate(H5P_DATASET_XFER);
    MUST(H5Pset_dxpl_mpio(indep, H5FD_MPIO_INDEPENDENT));

    /* "chunked": this rank's NC columns, collectively. */
    hsize_t dims[2] = {NR, (hsize_t)NC * ranks};
    hid_t space = H5Screate_simple(2, dims, NULL);
    MUST(space);
    hid_t cdcpl = H5Pcopy(dcpl);
    MUST(cdcpl);
    hsize_t chunk[2] = {16, dims[1] < 24 ? dims[1] : 24}; /* one rank: 16 x 16 */
    MUST(H5Pset_chunk(cdcpl, 2, chunk));
    hid_t dset = H5Dcreate2(file, "chunked", H5T_NATIVE_DOUBLE, space, H5P_DEFAULT, cdcpl,
                            H5P_DEFAULT);
    MUST(dset);
    hsize_t start[2] = {0, (hsize_t)rank * NC}, count[2] = {NR, NC};
    double* cols = malloc(sizeof(double) * NR * NC);
    for (hsize_t i = 0; i < NR; ++i)
        for (hsize_t j = 0; j < NC; ++j)
            cols[i * NC + j] = value(0, i, start[1] + j);
    hid_t fspace = H5Dget_space(dset);
    MUST(fspace);
    MUST(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL));
    hid_t mspace = H5Screate_simple(2, count, NULL);
    MUST(mspace);
    MUST(H5Dwrite(dset, H5T_NATIVE_DOUBLE, mspace, fspace, coll, cols));
    MUST(H5Dclose(dset));

    /* "strided": this rank's NR rows, independently, from every other
     * column of a buffer 2 * SC wide. */
    hsize_t sdims[2] = {(hsize_t)NR * ranks, SC};
    hid_t sspace = H5Screate_simple(2, sdims, NULL);
    MUST(sspace);
    hid_t sdset = H5Dcreate2(file, "strided", H5T_NATIVE_DOUBLE, sspace, H5P_DEFAULT, dcpl,
                             H5P_DEFAULT);
    MUST(sdset);
    double* wide = malloc(sizeof(double) * NR * 2 * SC);
    for (hsize_t i = 0; i < NR; ++i)
        for (hsize_t j = 0; j < 2 * SC; ++j)
            wide[i * 2 * SC + j] = j % 2 ? HOLE : value(1, (hsize_t)rank * NR + i, j / 2);
    hsize_t mdims[2] = {NR, 2 * SC}, mstart[2] = {0, 0}, mstride[2] = {1, 2};
    hsize_t scount[2] = {NR, SC}, sstart[2] = {(hsize_t)rank * NR, 0};
    hid_t smspace = H5Screate_simple(2, mdims, NULL);
    MUST(smspace);
    MUST(H5Sselect_hyperslab(smspace, H5S_SELECT_SET, mstart, mstride, scount, NULL));
    hid_t sfspace = H5Dget_space(sdset);
    MUST(sfspace);
    MUST(H5Sselect_hyperslab(sfspace, H5S_SELECT_SET, sstart, NULL, scount, NULL));
    MUST(H5Dwrite(sdset, H5T_NATIVE_DOUBLE, smspace, sfspace, indep, wide));
    MUST(H5Dclose(sdset));

    /* "compressed": as "chunked", with deflate, if this HDF5 can. */
    for (hsize_t i = 0; i < NR; ++i)
        for (hsize_t j = 0; j < NC; ++j)
            cols[i * NC + j] = value(2, i, start[1] + j);
    char reason[256];
    int compressed = write_compressed(file, space, dcpl, mspace, fspace, coll, cols, reason);
    if (rank == 0) {
        if (compressed)
            printf("compression: written\n");
        else
            printf("compression: not supported by this HDF5 (%s)\n", reason);
        fflush(stdout);
    }

    /* An attribute on the root group (small metadata write). */
    int nranks = ranks;
    hid_t ascalar = H5Screate(H5S_SCALAR);
    MUST(ascalar);
    hid_t attr = H5Acreate2(file, "ranks", H5T_NATIVE_INT, ascalar, H5P_DEFAULT, H5P_DEFAULT);
    MUST(attr);
    MUST(H5Awrite(attr, H5T_NATIVE_INT, &nranks));
    MUST(H5Aclose(attr));
    MUST(H5Sclose(ascalar));

    MUST(H5Sclose(smspace));
    MUST(H5Sclose(sfspace));
    MUST(H5Sclose(sspace));
    MUST(H5Sclose(mspace));
    MUST(H5Sclose(fspace));
    MUST(H5Sclose(space));
    MUST(H5Pclose(cdcpl));
    MUST(H5Pclose(dcpl));
    MUST(H5Fclose(file));

    /* Reopen read-only; every rank reads everything back. */
    file = H5Fopen(argv[1], H5F_ACC_RDONLY, fapl);
    MUST(file);
    int bad = 0, n;
    if ((n = check(file, "chunked", 0, coll)) < 0) {
        fprintf(stderr, "rank %d: chunked is missing\n", rank);
        bad += NR * NC * ranks;
    } else
        bad += n;
    if ((n = check(file, "strided", 1, indep)) < 0) {
        fprintf(stderr, "rank %d: strided is missing\n", rank);
        bad += NR * ranks * SC;
    } else
        bad += n;
    n = check(file, "compressed", 2, coll);
    if (n < 0 && compressed) {
        fprintf(stderr, "rank %d: compressed is missing\n", rank);
        bad += NR * NC * ranks;
    } else if (n >= 0 && !compressed) {
        fprintf(stderr, "rank %d: compressed is there though not written\n", rank);
        bad += 1;
    } else if (n > 0)
        bad += n;
    int back = -1;
    attr = H5Aopen(file, "ranks", H5P_DEFAULT);
    MUST(attr);
    MUST(H5Aread(attr, H5T_NATIVE_INT, &back));
    MUST(H5Aclose(attr));
    if (back != ranks) {
        fprintf(stderr, "rank %d: attribute ranks reads %d\n", rank, back);
        ++bad;
    }
    MUST(H5Fclose(file));
    MUST(H5Pclose(coll));
    MUST(H5Pclose(indep));
    MUST(H5Pclose(fapl));

    int all = 0;
    MPI_MUST(MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    if (rank == 0)
        printf("hdf5_chunked_app: %d ranks, %d values read back wrong\n", ranks, all);
    free(cols);
    free(wide);
    MPI_Finalize();
    return all == 0 ? 0 : 1;
}
