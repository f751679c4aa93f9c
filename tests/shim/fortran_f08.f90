! A Fortran 2008 MPI program (`use mpi_f08`), whose MPI_Init and MPI_Finalize
! MPICH sends straight to PMPI_: the shim must still attach and detach.
program fortran_f08
  use mpi_f08
  implicit none
  integer :: rank
  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  if (rank == 0) print '(a)', 'fortran_f08: initialised'
  call MPI_Finalize()
end program fortran_f08
