/* A plain MPI-IO checkpoint loop, with no iofwd in it: run once as is and once
 * under the shim (bench/shim.sh) to see what the shim changes for an
 * unmodified program.
 *
 *   mpiio_bench DIR [--sizes 1M,16M,...] [--reps N] [--pattern contiguous|subarray|pnetcdf]
 *
 * For each size and repetition every rank writes its block of a new shared
 * file with MPI_File_write_at_all, then calls MPI_File_sync and closes it.
 * The block is one run of the file (contiguous), or (subarray) the rank's
 * 4096 columns of a 2-D array of doubles with 4096 * ranks columns in C
 * order, written through a subarray file view: one 32 KiB run per row,
 * the ranks' runs interleaved; or (pnetcdf) the same array as a PnetCDF
 * variable, written with ncmpi_put_vara_double_all and made durable with
 * ncmpi_sync (built only where PnetCDF for MPICH was found; without it the
 * program says so and exits with status 3).
 * Reported per size (medians over repetitions of the slowest rank): the time
 * blocked in the write call, and the time until the sync returned (durable).
 * One line per size: "size BYTES write_ms X durable_ms Y". */
#include <mpi.h>
#ifdef IOFWD_BENCH_PNETCDF
#include <pnetcdf.h>
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int cmp_double(const void* a, const void* b)
{
    const double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

static double median(double* v, int n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static long long parse_size(const char* s)
{
    char* end = NULL;
    long long v = strtoll(s, &end, 10);
    if (*end == 'K' || *end == 'k') v <<= 10;
    else if (*end == 'M' || *end == 'm') v <<= 20;
    else if (*end == 'G' || *end == 'g') v <<= 30;
    return v;
}

int main(int argc, char** argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0, ranks = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    const char* dir = argc > 1 ? argv[1] : ".";
    char sizes[256] = "1M,16M,64M,256M";
    int reps = 5;
    int subarray = 0, pnetcdf = 0;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--sizes") == 0)
            snprintf(sizes, sizeof sizes, "%s", argv[i + 1]);
        else if (strcmp(argv[i], "--reps") == 0)
            reps = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--pattern") == 0) {
            subarray = strcmp(argv[i + 1], "subarray") == 0;
            pnetcdf = strcmp(argv[i + 1], "pnetcdf") == 0;
        }
    }
#ifndef IOFWD_BENCH_PNETCDF
    if (pnetcdf) {
        if (rank == 0)
            fprintf(stderr, "mpiio_bench: built without PnetCDF (scripts/pnetcdf.sh builds it)\n");
        MPI_Finalize();
        return 3;
    }
#endif
    const int cols = 4096; /* per rank, for --pattern subarray */
    if (reps < 1 || reps > 100)
        reps = 5;
    double* w = malloc(sizeof(double) * reps);
    double* d = malloc(sizeof(double) * reps);
    /* strtok_r: PnetCDF calls strtok itself (parsing its hints), which
     * would lose our place in the list after the first size. */
    char* rest = NULL;
    for (char* tok = strtok_r(sizes, ",", &rest); tok; tok = strtok_r(NULL, ",", &rest)) {
        const long long size = parse_size(tok);
        char* buf = malloc(size);
        memset(buf, rank + 1, size);
        for (int r = 0; r < reps; ++r) {
            char path[4096];
            snprintf(path, sizeof path, "%s/ckpt-%s-%d.bin", dir, tok, r);
            const int rows = (int)(size / ((long long)cols * 8));
            double t0 = 0, t1 = 0, t2 = 0;
            if (pnetcdf) {
#ifdef IOFWD_BENCH_PNETCDF
                int ncid, dims[2], var;
                ncmpi_create(MPI_COMM_WORLD, path, NC_CLOBBER | NC_64BIT_DATA, MPI_INFO_NULL,
                             &ncid);
                ncmpi_def_dim(ncid, "rows", rows, &dims[0]);
                ncmpi_def_dim(ncid, "cols", (MPI_Offset)cols * ranks, &dims[1]);
                ncmpi_def_var(ncid, "field", NC_DOUBLE, 2, dims, &var);
                ncmpi_enddef(ncid);
                const MPI_Offset start[2] = {0, (MPI_Offset)cols * rank}, count[2] = {rows, cols};
                MPI_Barrier(MPI_COMM_WORLD);
                t0 = MPI_Wtime();
                ncmpi_put_vara_double_all(ncid, var, start, count, (const double*)buf);
                t1 = MPI_Wtime();
                ncmpi_sync(ncid);
                t2 = MPI_Wtime();
                ncmpi_close(ncid);
#endif
            } else {
                MPI_File fh;
                MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_WRONLY,
                              MPI_INFO_NULL, &fh);
                MPI_Datatype view = MPI_DATATYPE_NULL;
                if (subarray) {
                    int gsizes[2] = {rows, cols * ranks}, subsizes[2] = {rows, cols};
                    int starts[2] = {0, cols * rank};
                    MPI_Type_create_subarray(2, gsizes, subsizes, starts, MPI_ORDER_C,
                                             MPI_DOUBLE, &view);
                    MPI_Type_commit(&view);
                    MPI_File_set_view(fh, 0, MPI_DOUBLE, view, "native", MPI_INFO_NULL);
                }
                MPI_Barrier(MPI_COMM_WORLD);
                t0 = MPI_Wtime();
                if (subarray)
                    MPI_File_write_at_all(fh, 0, buf, (int)(size / 8), MPI_DOUBLE,
                                          MPI_STATUS_IGNORE);
                else
                    MPI_File_write_at_all(fh, rank * (MPI_Offset)size, buf, (int)size,
                                          MPI_BYTE, MPI_STATUS_IGNORE);
                t1 = MPI_Wtime();
                MPI_File_sync(fh);
                t2 = MPI_Wtime();
                MPI_File_close(&fh);
                if (view != MPI_DATATYPE_NULL)
                    MPI_Type_free(&view);
            }
            double mine[2] = {t1 - t0, t2 - t0}, worst[2];
            MPI_Reduce(mine, worst, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
            w[r] = worst[0];
            d[r] = worst[1];
            if (rank == 0)
                unlink(path);
        }
        if (rank == 0)
            printf("size %lld write_ms %.3f durable_ms %.3f\n", size, median(w, reps) * 1e3,
                   median(d, reps) * 1e3);
        fflush(stdout);
        free(buf);
    }
    free(w);
    free(d);
    MPI_Finalize();
    return 0;
}
