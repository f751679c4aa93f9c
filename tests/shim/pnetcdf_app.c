/* An ordinary PnetCDF program, built without any iofwd header or library, for
 * the shim tests: run with and without the shim, the files compared with cmp
 * and ncmpidiff.
 *
 *   pnetcdf_app FILE
 *
 * Creates a CDF-5 file with global attributes and two variables, each with
 * an attribute:
 *   "temperature"  double, NZ x NY x NX*ranks, decomposed along its fastest
 *                  dimension: each rank's block is NX values of every (z, y)
 *                  row, so its part of the file is strided in two dimensions;
 *   "pressure"     float, NY*ranks x NX, decomposed along its slowest
 *                  dimension (one run per rank);
 * written collectively with ncmpi_put_vara_*_all (PnetCDF sets a subarray
 * file view and calls MPI_File_write_at_all). Then it closes the file,
 * reopens it read-only, every rank reads both variables back whole and the
 * attributes, and rank 0 prints "pnetcdf_app: N ranks, K values read back
 * wrong" (exit status 1 if any). A failing call aborts the job. */
#include <mpi.h>
#include <pnetcdf.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NZ 16
#define NY 32
#define NX 64

static int rank, ranks;

#define MUST(call)                                                               \
    do {                                                                         \
        int rc_ = (call);                                                        \
        if (rc_ != NC_NOERR) {                                                   \
            fprintf(stderr, "rank %d: %s failed: %s\n", rank, #call,             \
                    ncmpi_strerror(rc_));                                        \
            MPI_Abort(MPI_COMM_WORLD, 3);                                        \
        }                                                                        \
    } while (0)

static double temperature(MPI_Offset z, MPI_Offset y, MPI_Offset x)
{
    return 1e6 * (double)z + 1e3 * (double)y + (double)x + 0.5;
}

static float pressure(MPI_Offset y, MPI_Offset x)
{
    return (float)(y * 100 + x) + 0.25f;
}

int main(int argc, char** argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    if (argc < 2) {
        if (rank == 0)
            fprintf(stderr, "usage: pnetcdf_app FILE\n");
        MPI_Finalize();
        return 2;
    }
    const char* path = argv[1];
    const MPI_Offset gx = (MPI_Offset)NX * ranks, gy = (MPI_Offset)NY * ranks;

    int ncid, dims3[3], dims2[2], tvar, pvar;
    MUST(ncmpi_create(MPI_COMM_WORLD, path, NC_CLOBBER | NC_64BIT_DATA, MPI_INFO_NULL, &ncid));
    MUST(ncmpi_def_dim(ncid, "z", NZ, &dims3[0]));
    MUST(ncmpi_def_dim(ncid, "y", NY, &dims3[1]));
    MUST(ncmpi_def_dim(ncid, "x", gx, &dims3[2]));
    MUST(ncmpi_def_dim(ncid, "py", gy, &dims2[0]));
    dims2[1] = dims3[2];
    MUST(ncmpi_def_var(ncid, "temperature", NC_DOUBLE, 3, dims3, &tvar));
    MUST(ncmpi_def_var(ncid, "pressure", NC_FLOAT, 2, dims2, &pvar));
    const char* title = "iofwd shim test";
    MUST(ncmpi_put_att_text(ncid, NC_GLOBAL, "title", strlen(title), title));
    const double levels[3] = {1000.0, 850.0, 500.0};
    MUST(ncmpi_put_att_double(ncid, NC_GLOBAL, "levels", NC_DOUBLE, 3, levels));
    MUST(ncmpi_put_att_text(ncid, tvar, "units", 1, "K"));
    MUST(ncmpi_put_att_text(ncid, pvar, "units", 3, "hPa"));
    MUST(ncmpi_enddef(ncid));

    /* This rank's blocks. */
    double* t = malloc(sizeof(double) * NZ * NY * NX);
    for (MPI_Offset z = 0; z < NZ; ++z)
        for (MPI_Offset y = 0; y < NY; ++y)
            for (MPI_Offset x = 0; x < NX; ++x)
                t[(z * NY + y) * NX + x] = temperature(z, y, (MPI_Offset)rank * NX + x);
    float* p = malloc(sizeof(float) * NY * gx);
    for (MPI_Offset y = 0; y < NY; ++y)
        for (MPI_Offset x = 0; x < gx; ++x)
            p[y * gx + x] = pressure((MPI_Offset)rank * NY + y, x);
    MPI_Offset tstart[3] = {0, 0, (MPI_Offset)rank * NX}, tcount[3] = {NZ, NY, NX};
    MPI_Offset pstart[2] = {(MPI_Offset)rank * NY, 0}, pcount[2] = {NY, gx};
    MUST(ncmpi_put_vara_double_all(ncid, tvar, tstart, tcount, t));
    MUST(ncmpi_put_vara_float_all(ncid, pvar, pstart, pcount, p));
    MUST(ncmpi_close(ncid));
    free(p);
    free(t);

    /* Read back, whole, on every rank. */
    long wrong = 0;
    MUST(ncmpi_open(MPI_COMM_WORLD, path, NC_NOWRITE, MPI_INFO_NULL, &ncid));
    MUST(ncmpi_inq_varid(ncid, "temperature", &tvar));
    MUST(ncmpi_inq_varid(ncid, "pressure", &pvar));
    double* tall = malloc(sizeof(double) * NZ * NY * gx);
    float* pall = malloc(sizeof(float) * gy * gx);
    MPI_Offset t0[3] = {0, 0, 0}, tn[3] = {NZ, NY, gx}, p0[2] = {0, 0}, pn[2] = {gy, gx};
    MUST(ncmpi_get_vara_double_all(ncid, tvar, t0, tn, tall));
    MUST(ncmpi_get_vara_float_all(ncid, pvar, p0, pn, pall));
    for (MPI_Offset z = 0; z < NZ; ++z)
        for (MPI_Offset y = 0; y < NY; ++y)
            for (MPI_Offset x = 0; x < gx; ++x)
                wrong += tall[(z * NY + y) * gx + x] != temperature(z, y, x);
    for (MPI_Offset y = 0; y < gy; ++y)
        for (MPI_Offset x = 0; x < gx; ++x)
            wrong += pall[y * gx + x] != pressure(y, x);
    double got_levels[3] = {0, 0, 0};
    MUST(ncmpi_get_att_double(ncid, NC_GLOBAL, "levels", got_levels));
    wrong += memcmp(got_levels, levels, sizeof levels) != 0;
    MUST(ncmpi_close(ncid));
    free(pall);
    free(tall);

    long all = 0;
    MPI_Allreduce(&wrong, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("pnetcdf_app: %d ranks, %ld values read back wrong\n", ranks, all);
    MPI_Finalize();
    return all == 0 ? 0 : 1;
}
