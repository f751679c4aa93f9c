/* A collective call right after a forwarded write that failed on one rank only.
 * Each rank writes its 4 KiB block with MPI_File_write_at (forwarded; one
 * rank's daemon fails it), then every rank calls MPI_File_read_at_all, the
 * first call that settles the writes. Prints, per rank, the error classes of
 * both calls and the letter its block reads back as ('-' if it does not):
 *   rank R: write_at class C read_at_all class C block L
 * Then the same with a collective that starts a request: write_at,
 * MPI_File_iread_at_all, MPI_Wait, MPI_File_sync (where the failure must
 * come back):
 *   rank R: write_at class C iread_at_all class C wait class C sync class C
 * Then a large-count call: write_at a second block, MPI_File_iread_at_c it
 * back, MPI_Wait:
 *   rank R: iread_at_c class C wait class C block L
 * Then write_at, MPI_File_iread_at_all, MPI_Wait and MPI_File_close (where
 * the failure must come back, no sync between):
 *   rank R: iread_at_all class C wait class C close class C
 * The file's error handler counts its calls and asks MPI_File_get_size (as
 * a handler may), which must neither deadlock nor fail:
 *   rank R: handler calls N get_size class C
 * and exits 0 once every rank is out of the collectives.
 *   settle_split_app DIR */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

enum { block_size = 4096 };

static int handler_calls = 0, handler_size_class = 0;

static void handler(MPI_File* fh, int* code, ...)
{
    (void)code;
    ++handler_calls;
    MPI_Offset size = 0;
    const int rc = MPI_File_get_size(*fh, &size);
    if (rc != MPI_SUCCESS)
        MPI_Error_class(rc, &handler_size_class);
}

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
    MPI_Errhandler eh;
    MPI_File_create_errhandler(handler, &eh);
    MPI_File_set_errhandler(fh, eh);
    static char block[block_size], got[block_size];
    memset(block, 'a' + rank, sizeof block);
    const MPI_Offset at = (MPI_Offset)rank * block_size;
    const int wrc = MPI_File_write_at(fh, at, block, block_size, MPI_BYTE, MPI_STATUS_IGNORE);
    const int rrc = MPI_File_read_at_all(fh, at, got, block_size, MPI_BYTE, MPI_STATUS_IGNORE);
    const int same = rrc == MPI_SUCCESS && memcmp(got, block, block_size) == 0;
    printf("rank %d: write_at class %d read_at_all class %d block %c\n", rank, error_class(wrc),
           error_class(rrc), same ? 'a' + rank : '-');
    fflush(stdout);

    const int w2 = MPI_File_write_at(fh, at, block, block_size, MPI_BYTE, MPI_STATUS_IGNORE);
    MPI_Request req = MPI_REQUEST_NULL;
    const int irc = MPI_File_iread_at_all(fh, at, got, block_size, MPI_BYTE, &req);
    const int wait_rc = irc == MPI_SUCCESS ? MPI_Wait(&req, MPI_STATUS_IGNORE) : MPI_SUCCESS;
    const int src = MPI_File_sync(fh);
    printf("rank %d: write_at class %d iread_at_all class %d wait class %d sync class %d\n", rank,
           error_class(w2), error_class(irc), error_class(wait_rc), error_class(src));
    fflush(stdout);

    static char block2[block_size];
    memset(block2, 'A' + rank, sizeof block2);
    const MPI_Offset at2 = (MPI_Offset)(2 + rank) * block_size;
    MPI_File_write_at(fh, at2, block2, block_size, MPI_BYTE, MPI_STATUS_IGNORE);
    memset(got, 0, sizeof got);
    req = MPI_REQUEST_NULL;
    const int crc = MPI_File_iread_at_c(fh, at2, got, block_size, MPI_BYTE, &req);
    const int cwait = crc == MPI_SUCCESS ? MPI_Wait(&req, MPI_STATUS_IGNORE) : MPI_SUCCESS;
    const int same2 = crc == MPI_SUCCESS && memcmp(got, block2, block_size) == 0;
    printf("rank %d: iread_at_c class %d wait class %d block %c\n", rank, error_class(crc),
           error_class(cwait), same2 ? 'A' + rank : '-');

    const MPI_Offset at3 = (MPI_Offset)(4 + rank) * block_size;
    MPI_File_write_at(fh, at3, block, block_size, MPI_BYTE, MPI_STATUS_IGNORE);
    req = MPI_REQUEST_NULL;
    const int irc3 = MPI_File_iread_at_all(fh, at3, got, block_size, MPI_BYTE, &req);
    const int wait3 = irc3 == MPI_SUCCESS ? MPI_Wait(&req, MPI_STATUS_IGNORE) : MPI_SUCCESS;
    const int close_rc = MPI_File_close(&fh);
    printf("rank %d: iread_at_all class %d wait class %d close class %d\n", rank,
           error_class(irc3), error_class(wait3), error_class(close_rc));
    printf("rank %d: handler calls %d get_size class %d\n", rank, handler_calls,
           handler_size_class);
    fflush(stdout);
    MPI_Errhandler_free(&eh);
    MPI_Finalize();
    return 0;
}
