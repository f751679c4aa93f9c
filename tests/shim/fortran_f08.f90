! A Fortran 2008 MPI program (`use mpi_f08`). MPICH sends its MPI_Init,
! MPI_Finalize and the MPI-IO calls that open, close, sync and set a view
! straight to PMPI_; the shim wraps those bindings. Each rank writes its
! block of rows of a 2-D array of doubles through a subarray view
! (collective), then every other element of an integer array (a
! non-contiguous array section) interleaved with the other ranks' in blocks
! of 16 through a strided view, and checks the file's size.
!   fortran_f08 FILE
program fortran_f08
  use mpi_f08
  implicit none
  integer, parameter :: nx = 64, ny = 48
  integer :: rank, nprocs, i, j, failures
  type(MPI_File) :: fh
  type(MPI_Datatype) :: rows, one_int, interleaved
  integer :: sizes(2), subsizes(2), starts(2)
  real(8) :: a(nx, ny)
  integer :: b(2 * nx * ny)
  integer(kind=MPI_OFFSET_KIND) :: ints_at, fsize, expect
  integer(kind=MPI_ADDRESS_KIND) :: lb, extent, at(1)
  character(len=4096) :: path

  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs)
  if (rank == 0) print '(a)', 'fortran_f08: initialised'
  call get_command_argument(1, path)
  failures = 0
  do j = 1, ny
    do i = 1, nx
      a(i, j) = rank * 1000000 + j * 1000 + i
    end do
  end do
  do i = 1, size(b)
    b(i) = rank * 1000000 + i
  end do

  call MPI_File_open(MPI_COMM_WORLD, trim(path), ior(MPI_MODE_CREATE, MPI_MODE_WRONLY), &
                     MPI_INFO_NULL, fh)
  ! Rows rank*nx+1 .. (rank+1)*nx of an (nx*nprocs) x ny array: a strided view.
  sizes = [nx * nprocs, ny]
  subsizes = [nx, ny]
  starts = [rank * nx, 0]
  call MPI_Type_create_subarray(2, sizes, subsizes, starts, MPI_ORDER_FORTRAN, &
                                MPI_DOUBLE_PRECISION, rows)
  call MPI_Type_commit(rows)
  call MPI_File_set_view(fh, 0_MPI_OFFSET_KIND, MPI_DOUBLE_PRECISION, rows, 'native', &
                         MPI_INFO_NULL)
  call MPI_File_write_all(fh, a, nx * ny, MPI_DOUBLE_PRECISION, MPI_STATUS_IGNORE)

  ! After the doubles, the ranks' integers interleaved in blocks of 16.
  ints_at = 8_MPI_OFFSET_KIND * nx * nprocs * ny
  at(1) = 64 * rank
  lb = 0
  extent = 64 * nprocs
  call MPI_Type_create_hindexed_block(1, 16, at, MPI_INTEGER, one_int)
  call MPI_Type_create_resized(one_int, lb, extent, interleaved)
  call MPI_Type_commit(interleaved)
  call MPI_File_set_view(fh, ints_at, MPI_INTEGER, interleaved, 'native', MPI_INFO_NULL)
  call MPI_File_write_all(fh, b(1:size(b):2), nx * ny, MPI_INTEGER, MPI_STATUS_IGNORE)

  call MPI_File_sync(fh)
  call MPI_Barrier(MPI_COMM_WORLD)
  call MPI_File_sync(fh)
  call MPI_File_get_size(fh, fsize)
  expect = ints_at + 4_MPI_OFFSET_KIND * nx * ny * nprocs
  if (fsize /= expect) then
    print '(a,i0,a,i0)', 'fortran_f08: file size ', fsize, ', expected ', expect
    failures = failures + 1
  end if
  call MPI_File_close(fh)
  call MPI_Type_free(rows)
  call MPI_Type_free(interleaved)
  call MPI_Type_free(one_int)
  if (rank == 0) print '(a,i0,a)', 'fortran_f08: ', failures, ' failed checks'
  call MPI_Finalize()
  if (failures /= 0) stop 1
end program fortran_f08
