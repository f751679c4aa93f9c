/* An ordinary parallel HDF5 program (Debian's libhdf5-mpich), built without
 * any iofwd header or library: the shim tests run it with and without the
 * shim and compare the files byte for byte and with h5diff.
 *
 *   hdf5_app FILE
 *
 * Each rank writes its rows of a 2-D dataset with independent transfers and
 * its block of a 1-D dataset with a collective transfer, plus an attribute,
 * then reads its rows back before closing (they must hold what was written).
 * Object times are not recorded, so two runs make identical bytes. */
#include <hdf5.h>
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>

#define ROWS 64  /* per rank */
#define COLS 1024
#define BLOCK (256 * 1024)

#define MUST(x)                                                     \
    do {                                                               \
        if ((x) < 0) {                                                 \
            fprintf(stderr, "rank %d: %s failed\n", rank, #x);         \
            MPI_Abort(MPI_COMM_WORLD, 3);                              \
        }                                                              \
    } while (0)

int main(int argc, char** argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0, ranks = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    if (argc < 2) {
        fprintf(stderr, "usage: hdf5_app FILE\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }

    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    MUST(H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL));
    hid_t file = H5Fcreate(argv[1], H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    MUST(file);

    /* 2-D: ROWS rows per rank, independent writes. */
    double* rows = malloc(sizeof(double) * ROWS * COLS);
    for (int i = 0; i < ROWS * COLS; ++i)
        rows[i] = rank * 1e6 + i * 0.5;
    hsize_t dims[2] = {(hsize_t)ranks * ROWS, COLS};
    hid_t space = H5Screate_simple(2, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    MUST(H5Pset_obj_track_times(dcpl, 0));
    hid_t dset = H5Dcreate2(file, "field", H5T_NATIVE_DOUBLE, space, H5P_DEFAULT, dcpl,
                            H5P_DEFAULT);
    MUST(dset);
    hsize_t start[2] = {(hsize_t)rank * ROWS, 0}, count[2] = {ROWS, COLS};
    hid_t fspace = H5Dget_space(dset);
    MUST(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL));
    hid_t mspace = H5Screate_simple(2, count, NULL);
    hid_t indep = H5Pcreate(H5P_DATASET_XFER);
    MUST(H5Pset_dxpl_mpio(indep, H5FD_MPIO_INDEPENDENT));
    MUST(H5Dwrite(dset, H5T_NATIVE_DOUBLE, mspace, fspace, indep, rows));

    /* 1-D: one block per rank, a collective write. */
    int* block = malloc(sizeof(int) * BLOCK);
    for (int i = 0; i < BLOCK; ++i)
        block[i] = rank * BLOCK + i;
    hsize_t n = (hsize_t)ranks * BLOCK;
    hid_t space1 = H5Screate_simple(1, &n, NULL);
    hid_t dset1 = H5Dcreate2(file, "ids", H5T_NATIVE_INT, space1, H5P_DEFAULT, dcpl,
                             H5P_DEFAULT);
    hsize_t s1 = (hsize_t)rank * BLOCK, c1 = BLOCK;
    hid_t fspace1 = H5Dget_space(dset1);
    MUST(H5Sselect_hyperslab(fspace1, H5S_SELECT_SET, &s1, NULL, &c1, NULL));
    hid_t mspace1 = H5Screate_simple(1, &c1, NULL);
    hid_t coll = H5Pcreate(H5P_DATASET_XFER);
    MUST(H5Pset_dxpl_mpio(coll, H5FD_MPIO_COLLECTIVE));
    MUST(H5Dwrite(dset1, H5T_NATIVE_INT, mspace1, fspace1, coll, block));

    /* An attribute (small metadata write). */
    int step = 42;
    hid_t ascalar = H5Screate(H5S_SCALAR);
    hid_t attr = H5Acreate2(dset, "step", H5T_NATIVE_INT, ascalar, H5P_DEFAULT, H5P_DEFAULT);
    MUST(H5Awrite(attr, H5T_NATIVE_INT, &step));
    H5Aclose(attr);
    H5Sclose(ascalar);

    /* Read our rows back before closing. */
    double* back = malloc(sizeof(double) * ROWS * COLS);
    MUST(H5Dread(dset, H5T_NATIVE_DOUBLE, mspace, fspace, indep, back));
    int bad = 0;
    for (int i = 0; i < ROWS * COLS; ++i)
        bad += back[i] != rows[i];
    if (bad)
        fprintf(stderr, "rank %d: %d values read back differ\n", rank, bad);

    H5Pclose(dcpl);
    H5Pclose(coll);
    H5Pclose(indep);
    H5Sclose(mspace1);
    H5Sclose(fspace1);
    H5Sclose(space1);
    H5Dclose(dset1);
    H5Sclose(mspace);
    H5Sclose(fspace);
    H5Sclose(space);
    H5Dclose(dset);
    H5Fclose(file);
    H5Pclose(fapl);

    int all = 0;
    MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("hdf5_app: %d ranks, %d values read back wrong\n", ranks, all);
    free(rows);
    free(back);
    free(block);
    MPI_Finalize();
    return all == 0 ? 0 : 1;
}
