! The same kind of check as rw.f90 through the mpi_f08 module (Open MPI's mpi_f08
! bindings reach the C library through the PMPI names as well): write_at_all of a
! block per rank, write_ordered after it (shared file pointer), iread_at + MPI_Wait and
! read_ordered back, checked.
program weft_rw_f08
    use mpi_f08
    implicit none
    integer, parameter :: n = 512
    integer :: rank, nprocs, i, cnt
    type(MPI_File) :: fh
    type(MPI_Status) :: status
    type(MPI_Request) :: req
    integer :: buf(n), back(n)
    integer(kind=MPI_OFFSET_KIND) :: off, pos
    character(len=1024) :: name

    call MPI_Init()
    call MPI_Comm_rank(MPI_COMM_WORLD, rank)
    call MPI_Comm_size(MPI_COMM_WORLD, nprocs)
    call get_command_argument(1, name)
    do i = 1, n
        buf(i) = rank * 100000 + i
    end do
    call MPI_File_open(MPI_COMM_WORLD, trim(name), ior(MPI_MODE_CREATE, MPI_MODE_RDWR), &
                       MPI_INFO_NULL, fh)
    off = int(rank, MPI_OFFSET_KIND) * n * 4
    call MPI_File_write_at_all(fh, off, buf, n, MPI_INTEGER, status)
    call MPI_Get_count(status, MPI_INTEGER, cnt)
    call check(cnt == n, 'write_at_all count')
    ! The shared pointer after the blocks (in bytes: the default view).
    call MPI_File_seek_shared(fh, int(nprocs, MPI_OFFSET_KIND) * n * 4, MPI_SEEK_SET)
    buf = buf + 1
    call MPI_File_write_ordered(fh, buf, (rank + 1) * 4, MPI_INTEGER, status)
    call MPI_File_get_position_shared(fh, pos)
    call check(pos == int(nprocs, MPI_OFFSET_KIND) * n * 4 + 16 * nprocs * (nprocs + 1) / 2, &
               'shared position')
    call MPI_Barrier(MPI_COMM_WORLD)
    back = 0
    call MPI_File_iread_at(fh, off, back, n, MPI_INTEGER, req)
    call MPI_Wait(req, status)
    call MPI_Get_count(status, MPI_INTEGER, cnt)
    call check(cnt == n .and. all(back == buf - 1), 'iread_at')
    call MPI_File_seek_shared(fh, int(nprocs, MPI_OFFSET_KIND) * n * 4, MPI_SEEK_SET)
    back = 0
    call MPI_File_read_ordered(fh, back, (rank + 1) * 4, MPI_INTEGER, status)
    call check(all(back(1:(rank + 1) * 4) == buf(1:(rank + 1) * 4)), 'read_ordered')
    call MPI_File_close(fh)
    if (rank == 0) print '(a)', 'fortran mpi_f08 mpi-io ok'
    call MPI_Finalize()

contains

    subroutine check(ok, what)
        logical, intent(in) :: ok
        character(len=*), intent(in) :: what
        if (.not. ok) then
            print '(a,i0,a,a)', 'rank ', rank, ': failed: ', what
            call MPI_Abort(MPI_COMM_WORLD, 1)
        end if
    end subroutine check
end program weft_rw_f08
