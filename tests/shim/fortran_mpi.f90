! An ordinary Fortran MPI-IO program (`use mpi`): each rank writes its block of
! integers at its offset, then the file is closed. Run with and without the shim.
program fortran_mpi
  use mpi
  implicit none
  integer, parameter :: n = 300000
  integer :: ierr, rank, fh, i
  integer :: values(n)
  integer(kind=MPI_OFFSET_KIND) :: offset
  integer :: status(MPI_STATUS_SIZE)
  character(len=4096) :: path

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call get_command_argument(1, path)
  do i = 1, n
    values(i) = rank * n + i
  end do
  call MPI_File_open(MPI_COMM_WORLD, trim(path), ior(MPI_MODE_CREATE, MPI_MODE_WRONLY), &
                     MPI_INFO_NULL, fh, ierr)
  offset = int(rank, MPI_OFFSET_KIND) * n * 4
  call MPI_File_write_at_all(fh, offset, values, n, MPI_INTEGER, status, ierr)
  if (ierr /= MPI_SUCCESS) stop 3
  call MPI_File_close(fh, ierr)
  call MPI_Finalize(ierr)
end program fortran_mpi
