/* A minimal PMPI-based tool, as profilers and tracers are: it counts the
 * MPI_File_open and MPI_File_write_at calls that reach it and prints the
 * counts at MPI_Finalize. Preloaded after the shim, it must still see every
 * call the shim passes on. */
#include <mpi.h>
#include <stdio.h>

static int opens, writes_at;

int MPI_File_open(MPI_Comm comm, const char* name, int amode, MPI_Info info, MPI_File* fh)
{
    ++opens;
    return PMPI_File_open(comm, name, amode, info, fh);
}

int MPI_File_write_at(MPI_File fh, MPI_Offset offset, const void* buf, int count,
                      MPI_Datatype type, MPI_Status* status)
{
    ++writes_at;
    return PMPI_File_write_at(fh, offset, buf, count, type, status);
}

int MPI_Finalize(void)
{
    int rank = 0;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    printf("count_tool: rank %d saw %d MPI_File_open, %d MPI_File_write_at\n", rank, opens,
           writes_at);
    fflush(stdout);
    return PMPI_Finalize();
}
