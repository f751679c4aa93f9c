/* Many small MPI-IO writes, then (with SMALL_WRITES_HANG set) no sync: the
 * program says "written" and waits to be killed.
 *
 *   small_writes_app FILE N
 *
 * Each rank writes N blocks of 4000 bytes with MPI_File_write_at, block k of
 * rank r at offset (k * ranks + r) * 4000, filled from a seed of that index.
 * Without SMALL_WRITES_HANG it syncs, closes and exits 0. */
#include <mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define BLOCK 4000

int main(int argc, char** argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0, ranks = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    if (argc < 3)
        MPI_Abort(MPI_COMM_WORLD, 2);
    const int n = atoi(argv[2]);
    MPI_File fh;
    if (MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL,
                      &fh) != MPI_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 3);
    unsigned char block[BLOCK];
    for (int k = 0; k < n; ++k) {
        const long long index = (long long)k * ranks + rank;
        uint32_t x = (uint32_t)index * 2654435761u + 7u;
        for (int i = 0; i < BLOCK; ++i) {
            x = x * 1103515245u + 12345u;
            block[i] = (unsigned char)(x >> 16);
        }
        if (MPI_File_write_at(fh, (MPI_Offset)(index * BLOCK), block, BLOCK, MPI_BYTE,
                              MPI_STATUS_IGNORE) != MPI_SUCCESS)
            MPI_Abort(MPI_COMM_WORLD, 4);
    }
    printf("written %d\n", rank);
    fflush(stdout);
    if (getenv("SMALL_WRITES_HANG"))
        for (;;)
            pause();
    MPI_File_sync(fh);
    MPI_File_close(&fh);
    MPI_Finalize();
    return 0;
}
