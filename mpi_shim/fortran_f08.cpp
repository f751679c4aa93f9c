// `use mpi_f08`: MPICH's Fortran 2008 bindings of the MPI-IO calls that open,
// close, sync and set up a file call PMPI_ directly, so the shim's C wrappers
// never see them (their writes and reads do reach the C MPI_ calls). These
// take the bindings' place and go through the shim's C wrappers instead: the
// arguments as gfortran passes them (derived-type handles by reference,
// character lengths as hidden size_t arguments at the end, an absent
// optional ierror as NULL), converted as MPICH's own bindings convert them.
#include <mpi.h>

#include <cstddef>
#include <string>

namespace {

// A Fortran string argument: its length given, trailing blanks not part of it.
std::string from_fortran(const char* s, std::size_t len)
{
    while (len > 0 && s[len - 1] == ' ')
        --len;
    return std::string(s, len);
}

void answer(MPI_Fint* ierror, int rc)
{
    if (ierror)
        *ierror = rc;
}

}  // namespace

extern "C" {

void mpi_file_open_f08_(const MPI_Fint* comm, const char* filename, const MPI_Fint* amode,
                        const MPI_Fint* info, MPI_Fint* fh, MPI_Fint* ierror,
                        std::size_t filename_len)
{
    MPI_File f = MPI_FILE_NULL;
    const int rc = MPI_File_open(MPI_Comm_f2c(*comm), from_fortran(filename, filename_len).c_str(),
                                 *amode, MPI_Info_f2c(*info), &f);
    *fh = MPI_File_c2f(f);
    answer(ierror, rc);
}

void mpi_file_close_f08_(MPI_Fint* fh, MPI_Fint* ierror)
{
    MPI_File f = MPI_File_f2c(*fh);
    const int rc = MPI_File_close(&f);
    *fh = MPI_File_c2f(f);
    answer(ierror, rc);
}

void mpi_file_delete_f08_(const char* filename, const MPI_Fint* info, MPI_Fint* ierror,
                          std::size_t filename_len)
{
    answer(ierror, MPI_File_delete(from_fortran(filename, filename_len).c_str(),
                                   MPI_Info_f2c(*info)));
}

void mpi_file_sync_f08_(const MPI_Fint* fh, MPI_Fint* ierror)
{
    answer(ierror, MPI_File_sync(MPI_File_f2c(*fh)));
}

void mpi_file_set_view_f08_(const MPI_Fint* fh, const MPI_Offset* disp, const MPI_Fint* etype,
                            const MPI_Fint* filetype, const char* datarep, const MPI_Fint* info,
                            MPI_Fint* ierror, std::size_t datarep_len)
{
    answer(ierror, MPI_File_set_view(MPI_File_f2c(*fh), *disp, MPI_Type_f2c(*etype),
                                     MPI_Type_f2c(*filetype),
                                     from_fortran(datarep, datarep_len).c_str(),
                                     MPI_Info_f2c(*info)));
}

// LOGICAL: gfortran's default kind, nonzero for .true.
void mpi_file_set_atomicity_f08_(const MPI_Fint* fh, const int* flag, MPI_Fint* ierror)
{
    answer(ierror, MPI_File_set_atomicity(MPI_File_f2c(*fh), *flag != 0));
}

void mpi_file_get_size_f08_(const MPI_Fint* fh, MPI_Offset* size, MPI_Fint* ierror)
{
    answer(ierror, MPI_File_get_size(MPI_File_f2c(*fh), size));
}

void mpi_file_set_size_f08_(const MPI_Fint* fh, const MPI_Offset* size, MPI_Fint* ierror)
{
    answer(ierror, MPI_File_set_size(MPI_File_f2c(*fh), *size));
}

void mpi_file_preallocate_f08_(const MPI_Fint* fh, const MPI_Offset* size, MPI_Fint* ierror)
{
    answer(ierror, MPI_File_preallocate(MPI_File_f2c(*fh), *size));
}

}  // extern "C"
