! Fortran MPI-IO on one file, named by the first argument (weft:/path or a local
! path): Open MPI's Fortran bindings reach the C library through the PMPI_File_*
! names, so on a weft: file this checks that libweft_mpiio.so serves those. Writes a
! contiguous block per rank (write_at_all), then through a noncontiguous view (a
! vector of blocks interleaved between the ranks: write_all, then the individual file
! pointer with write), nonblocking (iwrite_at, MPI_Wait) and reads everything back
! (read_all, read_at, iread_at), checking the data and the counts. The test compares
! the file byte for byte with the same program run on a local file.
program weft_rw
    use mpi
    implicit none
    integer, parameter :: n = 1000
    integer :: ierr, rank, nprocs, fh, vec, vtype, cnt, i, req
    integer :: status(MPI_STATUS_SIZE)
    integer :: buf(n), back(n)
    integer(kind=MPI_OFFSET_KIND) :: off, disp, size
    integer(kind=MPI_ADDRESS_KIND) :: lb, extent
    character(len=1024) :: name

    call MPI_Init(ierr)
    call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
    call MPI_Comm_size(MPI_COMM_WORLD, nprocs, ierr)
    call get_command_argument(1, name)
    do i = 1, n
        buf(i) = rank * 100000 + i
    end do

    call MPI_File_open(MPI_COMM_WORLD, trim(name), ior(MPI_MODE_CREATE, MPI_MODE_RDWR), &
                       MPI_INFO_NULL, fh, ierr)
    call check(ierr == MPI_SUCCESS, 'open')

    ! A contiguous block per rank.
    off = int(rank, MPI_OFFSET_KIND) * n * 4
    call MPI_File_write_at_all(fh, off, buf, n, MPI_INTEGER, status, ierr)
    call check(ierr == MPI_SUCCESS, 'write_at_all')
    call MPI_Get_count(status, MPI_INTEGER, cnt, ierr)
    call check(cnt == n, 'write_at_all count')

    ! Blocks of 10 integers interleaved between the ranks, after the contiguous part.
    disp = int(nprocs, MPI_OFFSET_KIND) * n * 4 + rank * 40
    call MPI_Type_vector(n / 10, 10, 10 * nprocs, MPI_INTEGER, vec, ierr)
    lb = 0
    extent = int(n, MPI_ADDRESS_KIND) * nprocs * 4
    call MPI_Type_create_resized(vec, lb, extent, vtype, ierr)
    call MPI_Type_commit(vtype, ierr)
    call MPI_File_set_view(fh, disp, MPI_INTEGER, vtype, 'native', MPI_INFO_NULL, ierr)
    call check(ierr == MPI_SUCCESS, 'set_view')
    call MPI_File_write_all(fh, buf, n, MPI_INTEGER, status, ierr)
    call check(ierr == MPI_SUCCESS, 'write_all')
    buf = buf + 7
    call MPI_File_write(fh, buf, n, MPI_INTEGER, status, ierr)
    call check(ierr == MPI_SUCCESS, 'write')
    ! Nonblocking, explicit offset (in etypes of the view): the third tile.
    buf = buf + 7
    off = 2 * n
    call MPI_File_iwrite_at(fh, off, buf, n, MPI_INTEGER, req, ierr)
    call check(ierr == MPI_SUCCESS, 'iwrite_at')
    call MPI_Wait(req, status, ierr)
    call check(ierr == MPI_SUCCESS, 'wait')
    call MPI_Get_count(status, MPI_INTEGER, cnt, ierr)
    call check(cnt == n, 'iwrite_at count')
    call MPI_File_sync(fh, ierr)
    call MPI_Barrier(MPI_COMM_WORLD, ierr)
    call MPI_File_sync(fh, ierr)

    ! Read it all back.
    call MPI_File_seek(fh, 0_MPI_OFFSET_KIND, MPI_SEEK_SET, ierr)
    call MPI_File_read_all(fh, back, n, MPI_INTEGER, status, ierr)
    call check(ierr == MPI_SUCCESS, 'read_all')
    call check(all(back == buf - 14), 'read_all data')
    call MPI_File_read(fh, back, n, MPI_INTEGER, status, ierr)
    call check(all(back == buf - 7), 'read data')
    back = 0
    call MPI_File_iread_at(fh, off, back, n, MPI_INTEGER, req, ierr)
    call check(ierr == MPI_SUCCESS, 'iread_at')
    call MPI_Wait(req, status, ierr)
    call MPI_Get_count(status, MPI_INTEGER, cnt, ierr)
    call check(cnt == n .and. all(back == buf), 'iread_at data')
    call MPI_File_set_view(fh, 0_MPI_OFFSET_KIND, MPI_BYTE, MPI_BYTE, 'native', MPI_INFO_NULL, ierr)
    off = int(rank, MPI_OFFSET_KIND) * n * 4
    call MPI_File_read_at(fh, off, back, n, MPI_INTEGER, status, ierr)
    call check(all(back == buf - 14), 'read_at data')
    call MPI_File_get_size(fh, size, ierr)
    call check(size == int(nprocs, MPI_OFFSET_KIND) * n * 4 * 4, 'size')
    call MPI_File_close(fh, ierr)
    call check(ierr == MPI_SUCCESS, 'close')
    call MPI_Type_free(vtype, ierr)
    call MPI_Type_free(vec, ierr)
    if (rank == 0) print '(a)', 'fortran mpi-io ok'
    call MPI_Finalize(ierr)

contains

    subroutine check(ok, what)
        logical, intent(in) :: ok
        character(len=*), intent(in) :: what
        integer :: e
        if (.not. ok) then
            print '(a,i0,a,a)', 'rank ', rank, ': failed: ', what
            call MPI_Abort(MPI_COMM_WORLD, 1, e)
        end if
    end subroutine check
end program weft_rw
