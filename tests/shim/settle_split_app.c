/* A collective call right after a forwarded write that failed on one rank only.
 * Each rank writes its 4 KiB block with MPI_File_write_at (forwarded; one
 * rank's daemon fails it), then every rank calls MPI_File_read_at_all, the
 * first call that settles the writes. Prints, per rank, the error classes of
 * both calls and the letter its block reads back as ('-' if it does not):
 *   rank R: write_at class C read_at_all class C block L
 * and exits 0 once every rank is out of the collective.
 *   settle_split_app DIR */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

enum { block_size = 4096 };

static int error_class(int rc)
{
    int cls = rc;
    if (rc != MPI_SUCCESS)
        MPI_Error_class(rc, &cls);
    return cls;
}

int main(int argc, char** argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc < 2) {
        fprintf(stderr, "usage: settle_split_app DIR\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/split.bin", argv[1]);
    MPI_File fh;
    if (MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh) !=
        MPI_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 3);
    MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN);
    static char block[block_size], got[block_size];
    memset(block, 'a' + rank, sizeof block);
    const MPI_Offset at = (MPI_Offset)rank * block_size;
    const int wrc = MPI_File_write_at(fh, at, block, block_size, MPI_BYTE, MPI_STATUS_IGNORE);
    const int rrc = MPI_File_read_at_all(fh, at, got, block_size, MPI_BYTE, MPI_STATUS_IGNORE);
    const int same = rrc == MPI_SUCCESS && memcmp(got, block, block_size) == 0;
    printf("rank %d: write_at class %d read_at_all class %d block %c\n", rank, error_class(wrc),
           error_class(rrc), same ? 'a' + rank : '-');
    fflush(stdout);
    MPI_File_close(&fh);
    MPI_Finalize();
    return 0;
}
