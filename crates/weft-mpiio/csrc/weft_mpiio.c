/* The MPI_File_* entry points of libweft_mpiio.so (reached through the Rust
 * trampolines in src/entry.rs, see there why). A file whose name starts with "weft:"
 * becomes a Weft file, a pointer to the Rust half's own struct; every call on any
 * other file passes through to the MPI library's PMPI_File_* (reached through REAL(),
 * real.h: this library defines the PMPI_File_* names too), so a Weft handle never
 * reaches the MPI library. Nonblocking, split collective and shared file pointer calls
 * are in requests.c. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "real.h"
#include "requests.h"
#include "shim.h"

#define OURS(fh) ((fh) != MPI_FILE_NULL && weft_mpiio_is_ours((wm_h)(fh)))
#define H(x) ((wm_h)(x))

/* "weft:/path", or a path inside a Weft mount (src/mount.rs): one file, one path. */
static int is_weft_name(const char *name)
{
    return name != NULL && (strncmp(name, "weft:", 5) == 0 || weft_mpiio_in_mount(name));
}

static int mpi_class(int e)
{
    switch (e) {
    case WM_OK: return MPI_SUCCESS;
    case WM_ERR_ARG: return MPI_ERR_ARG;
    case WM_ERR_COUNT: return MPI_ERR_COUNT;
    case WM_ERR_TYPE: return MPI_ERR_TYPE;
    case WM_ERR_AMODE: return MPI_ERR_AMODE;
    case WM_ERR_NO_SUCH_FILE: return MPI_ERR_NO_SUCH_FILE;
    case WM_ERR_FILE_EXISTS: return MPI_ERR_FILE_EXISTS;
    case WM_ERR_ACCESS: return MPI_ERR_ACCESS;
    case WM_ERR_NO_SPACE: return MPI_ERR_NO_SPACE;
    case WM_ERR_READ_ONLY: return MPI_ERR_READ_ONLY;
    case WM_ERR_IO: return MPI_ERR_IO;
    case WM_ERR_UNSUPPORTED_OPERATION: return MPI_ERR_UNSUPPORTED_OPERATION;
    case WM_ERR_UNSUPPORTED_DATAREP: return MPI_ERR_UNSUPPORTED_DATAREP;
    case WM_ERR_NOT_SAME: return MPI_ERR_NOT_SAME;
    case WM_ERR_FILE: return MPI_ERR_FILE;
    case WM_ERR_BAD_FILE: return MPI_ERR_BAD_FILE;
    case WM_ERR_INFO_VALUE: return MPI_ERR_INFO_VALUE;
    case WM_ERR_QUOTA: return MPI_ERR_QUOTA;
    case WM_ERR_INTERN: return MPI_ERR_INTERN;
    case WM_ERR_FILE_IN_USE: return MPI_ERR_FILE_IN_USE;
    default: return MPI_ERR_OTHER;
    }
}

/* Error codes that carry their reason: a failed call on a weft: file returns, instead
 * of the bare class, an error code made under that class (MPI_Add_error_code, so
 * MPI_Error_class gives the class back) whose MPI_Error_string is the class's text and
 * the library's message for this failure ("MPI_ERR_NO_SUCH_FILE: no such file: ...").
 * MPI cannot free an error code, so each class has a ring of ERROR_CODES_PER_CLASS,
 * made when first needed and reused in turn: a code keeps its reason until that many
 * later failures of its class (then it gives a later one). The message is taken from
 * the Rust half (forgotten there), so it goes with one code only; a failure with no
 * message, or outside MPI_Init..MPI_Finalize, and every failure under MPICH (see
 * mpi_code), returns the class. */
#define ERROR_CODES_PER_CLASS 32
#define WM_ERRORS (WM_ERR_FILE_IN_USE + 1)
static struct {
    int codes[ERROR_CODES_PER_CLASS];
    int made, next;
} reason_codes[WM_ERRORS];
static pthread_mutex_t reason_codes_lock = PTHREAD_MUTEX_INITIALIZER;

/* The full message of this thread's last failure (mpi_code keeps it here for the fatal
 * report, which is not cut to MPI_MAX_ERROR_STRING); emptied by invoke. */
static __thread char last_reason[1024];

/* Cuts `text` at most at `max` bytes, at a UTF-8 character's start. */
static void cut_utf8(char *text, size_t max)
{
    size_t n = strlen(text);
    if (n <= max)
        return;
    while (max > 0 && ((unsigned char)text[max] & 0xC0) == 0x80)
        max--;
    text[max] = '\0';
}

/* The error code to return for Weft error `werr`: one carrying this thread's last
 * message, else the class. */
static int mpi_code(int werr)
{
    int class = mpi_class(werr);
    last_reason[0] = '\0';
    if (class == MPI_SUCCESS)
        return class;
    if (weft_mpiio_take_last_error(last_reason, sizeof last_reason) == 0)
        return class;
    cut_utf8(last_reason, sizeof last_reason - 1);
    int initialized = 0, finalized = 1;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (werr <= 0 || werr >= WM_ERRORS || !initialized || finalized)
        return class;
#ifdef MPICH
    /* MPICH gives a code made under a predefined class a wrong string (another error's
     * text from its error stack): the class, as before, there. */
    return class;
#endif
    char text[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    if (MPI_Error_string(class, text, &len) != MPI_SUCCESS)
        len = 0;
    text[len] = '\0';
    char full[MPI_MAX_ERROR_STRING];
    snprintf(full, sizeof full, "%s: %s", text, last_reason);
    cut_utf8(full, sizeof full - 1);
    int code = class;
    pthread_mutex_lock(&reason_codes_lock);
    int i = reason_codes[werr].next;
    if (i == reason_codes[werr].made) {
        if (MPI_Add_error_code(class, &reason_codes[werr].codes[i]) == MPI_SUCCESS)
            reason_codes[werr].made++;
        else
            i = -1;
    }
    if (i >= 0 && MPI_Add_error_string(reason_codes[werr].codes[i], full) == MPI_SUCCESS) {
        code = reason_codes[werr].codes[i];
        reason_codes[werr].next = (i + 1) % ERROR_CODES_PER_CLASS;
    }
    pthread_mutex_unlock(&reason_codes_lock);
    return code;
}

static int amode_to_wm(int amode)
{
    int m = 0;
    if (amode & MPI_MODE_RDONLY) m |= WM_MODE_RDONLY;
    if (amode & MPI_MODE_RDWR) m |= WM_MODE_RDWR;
    if (amode & MPI_MODE_WRONLY) m |= WM_MODE_WRONLY;
    if (amode & MPI_MODE_CREATE) m |= WM_MODE_CREATE;
    if (amode & MPI_MODE_EXCL) m |= WM_MODE_EXCL;
    if (amode & MPI_MODE_DELETE_ON_CLOSE) m |= WM_MODE_DELETE_ON_CLOSE;
    if (amode & MPI_MODE_UNIQUE_OPEN) m |= WM_MODE_UNIQUE_OPEN;
    if (amode & MPI_MODE_SEQUENTIAL) m |= WM_MODE_SEQUENTIAL;
    if (amode & MPI_MODE_APPEND) m |= WM_MODE_APPEND;
    return m;
}

static int amode_from_wm(int m)
{
    int amode = 0;
    if (m & WM_MODE_RDONLY) amode |= MPI_MODE_RDONLY;
    if (m & WM_MODE_RDWR) amode |= MPI_MODE_RDWR;
    if (m & WM_MODE_WRONLY) amode |= MPI_MODE_WRONLY;
    if (m & WM_MODE_CREATE) amode |= MPI_MODE_CREATE;
    if (m & WM_MODE_EXCL) amode |= MPI_MODE_EXCL;
    if (m & WM_MODE_DELETE_ON_CLOSE) amode |= MPI_MODE_DELETE_ON_CLOSE;
    if (m & WM_MODE_UNIQUE_OPEN) amode |= MPI_MODE_UNIQUE_OPEN;
    if (m & WM_MODE_SEQUENTIAL) amode |= MPI_MODE_SEQUENTIAL;
    if (m & WM_MODE_APPEND) amode |= MPI_MODE_APPEND;
    return amode;
}

/* User file error handlers: MPI gives no way back from an MPI_Errhandler to its
 * function, so MPI_File_create_errhandler records the pair here. */
#define USER_ERRHANDLERS_MAX 64
static struct {
    MPI_Errhandler handler;
    MPI_File_errhandler_function *function;
} user_errhandlers[USER_ERRHANDLERS_MAX];
static int user_errhandler_count;
static pthread_mutex_t user_errhandler_lock = PTHREAD_MUTEX_INITIALIZER;

static MPI_File_errhandler_function *user_function(MPI_Errhandler eh)
{
    MPI_File_errhandler_function *f = NULL;
    pthread_mutex_lock(&user_errhandler_lock);
    for (int i = 0; i < user_errhandler_count; i++)
        if (user_errhandlers[i].handler == eh)
            f = user_errhandlers[i].function;
    pthread_mutex_unlock(&user_errhandler_lock);
    return f;
}

/* Hands error code `code` (from mpi_code, or a program's MPI_File_call_errhandler) to
 * error handler `eh` of file `fh` and returns it. */
static int invoke(MPI_Errhandler eh, MPI_File fh, int code)
{
    char why[sizeof last_reason];
    memcpy(why, last_reason, sizeof why);
    last_reason[0] = '\0';
    if (code == MPI_SUCCESS || eh == MPI_ERRORS_RETURN || eh == MPI_ERRHANDLER_NULL)
        return code;
    if (eh == MPI_ERRORS_ARE_FATAL) {
        int class = code;
        MPI_Error_class(code, &class);
        char text[MPI_MAX_ERROR_STRING];
        int len = 0;
        /* Without the message here (a program's MPI_File_call_errhandler), the code's
         * own string, which carries it for a code mpi_code made. */
        MPI_Error_string(why[0] != '\0' ? class : code, text, &len);
        if (why[0] != '\0')
            fprintf(stderr, "weft-mpiio: error on a weft: file: %s (%s); MPI_ERRORS_ARE_FATAL aborts\n",
                    why, text);
        else
            fprintf(stderr, "weft-mpiio: error on a weft: file (%s); MPI_ERRORS_ARE_FATAL aborts\n",
                    text);
        MPI_Abort(MPI_COMM_WORLD, class);
        return code;
    }
    MPI_File_errhandler_function *f = user_function(eh);
    if (f != NULL)
        f(&fh, &code);
    return code;
}

static MPI_Errhandler null_file_errhandler(void)
{
    MPI_Errhandler eh = MPI_ERRORS_RETURN;
    REAL(PMPI_File_get_errhandler)(MPI_FILE_NULL, &eh);
    return eh;
}

static int fail(MPI_File fh, int werr)
{
    if (werr == WM_OK)
        return MPI_SUCCESS;
    MPI_Errhandler eh = (MPI_Errhandler)weft_mpiio_errhandler(H(fh));
    return invoke(eh, fh, mpi_code(werr));
}

static void set_status(MPI_Status *status, int64_t bytes)
{
    if (status != MPI_STATUS_IGNORE)
        MPI_Status_set_elements_x(status, MPI_BYTE, (MPI_Count)bytes);
}

/* ---- external32 (MPI 3.1, 13.5.2) ----
 * Under a view in "external32" the data are converted by MPI's own MPI_Pack_external /
 * MPI_Unpack_external into a contiguous buffer, and that buffer is accessed through the
 * view, which places its bytes as it places native data (as ROMIO does). So a memory
 * datatype whose external32 size differs from its native size (MPI_LONG and
 * MPI_UNSIGNED_LONG are 4 bytes in external32, long double 16, ...) is refused with
 * MPI_ERR_UNSUPPORTED_DATAREP: its file layout would need the view's external32
 * extents. A collective call whose conversion fails on one rank still takes part (with
 * no data), so nothing hangs, and that rank returns the error. */

static int x32_refuse(int werr, const char *why)
{
    return weft_mpiio_fail_with(werr, why);
}

int wm_x32_begin(MPI_File fh, int write, const void *buf, int count, MPI_Datatype type,
                 struct wm_x32 *x32, void **tbuf, int *tcount, MPI_Datatype *ttype)
{
    x32->tmp = NULL;
    x32->ttype = MPI_DATATYPE_NULL;
    *tbuf = (void *)buf;
    *tcount = count;
    *ttype = type;
    if (!weft_mpiio_is_external32(H(fh)) || count <= 0)
        return WM_OK;
    int size = 0;
    MPI_Aint xsize = 0;
    if (MPI_Type_size(type, &size) != MPI_SUCCESS ||
        MPI_Pack_external_size("external32", 1, type, &xsize) != MPI_SUCCESS)
        return x32_refuse(WM_ERR_TYPE, "external32: the memory datatype is not valid");
    if (size == 0)
        return WM_OK;
    if (xsize != (MPI_Aint)size) {
        char why[256];
        snprintf(why, sizeof why,
                 "external32: the memory datatype has %d bytes natively and %ld in external32; "
                 "Weft converts only types of the same size in both (not MPI_LONG, "
                 "MPI_UNSIGNED_LONG, long double, ...)",
                 size, (long)xsize);
        return x32_refuse(WM_ERR_UNSUPPORTED_DATAREP, why);
    }
    MPI_Aint total = (MPI_Aint)size * (MPI_Aint)count;
    x32->tmp = malloc((size_t)total);
    if (x32->tmp == NULL)
        return x32_refuse(WM_ERR_NO_SPACE, "external32: no memory for the conversion buffer");
    if (MPI_Type_contiguous(size, MPI_BYTE, &x32->ttype) != MPI_SUCCESS ||
        MPI_Type_commit(&x32->ttype) != MPI_SUCCESS) {
        free(x32->tmp);
        x32->tmp = NULL;
        return x32_refuse(WM_ERR_INTERN, "external32: MPI_Type_contiguous failed");
    }
    if (write) {
        MPI_Aint pos = 0;
        if (MPI_Pack_external("external32", buf, count, type, x32->tmp, total, &pos) !=
            MPI_SUCCESS) {
            wm_x32_end(x32, 1, 0, NULL, 0, type);
            return x32_refuse(WM_ERR_IO, "external32: MPI_Pack_external failed");
        }
    }
    *tbuf = x32->tmp;
    *ttype = x32->ttype;
    return WM_OK;
}

int wm_x32_end(struct wm_x32 *x32, int write, int64_t bytes, void *buf, int count,
               MPI_Datatype type)
{
    int e = WM_OK;
    if (x32->tmp == NULL)
        return WM_OK;
    if (!write && bytes > 0) {
        int size = 0;
        MPI_Type_size(type, &size);
        /* Whole elements only: a partial last one is left as it was. */
        int whole = size > 0 ? (int)(bytes / size) : 0;
        if (whole > count)
            whole = count;
        MPI_Aint pos = 0;
        if (whole > 0 && MPI_Unpack_external("external32", x32->tmp, (MPI_Aint)bytes, &pos, buf,
                                             whole, type) != MPI_SUCCESS)
            e = x32_refuse(WM_ERR_IO, "external32: MPI_Unpack_external failed");
    }
    free(x32->tmp);
    x32->tmp = NULL;
    if (x32->ttype != MPI_DATATYPE_NULL)
        MPI_Type_free(&x32->ttype);
    return e;
}

static int access_raw(MPI_File fh, int shared, int flags, MPI_Offset offset, void *buf,
                      int count, MPI_Datatype type, int64_t *bytes)
{
    if (shared)
        return weft_mpiio_shared_io(H(fh), flags, buf, count, H(type), bytes);
    return weft_mpiio_io(H(fh), flags, (int64_t)offset, buf, count, H(type), bytes);
}

int wm_x32_take_part(MPI_File fh, int werr, void (*part)(MPI_File, void *), void *arg)
{
    char why[1024] = "";
    weft_mpiio_last_error(why, sizeof why);
    part(fh, arg);
    return weft_mpiio_fail_with(werr, why[0] != '\0' ? why : "external32 conversion failed");
}

struct access_part {
    int shared, flags;
    MPI_Offset offset;
};

static void access_nothing(MPI_File fh, void *arg)
{
    struct access_part *a = arg;
    int64_t bytes = 0;
    access_raw(fh, a->shared, a->flags, a->offset, NULL, 0, MPI_BYTE, &bytes);
}

int wm_access(MPI_File fh, int shared, int flags, MPI_Offset offset, void *buf, int count,
              MPI_Datatype type, int64_t *bytes)
{
    struct wm_x32 x32;
    void *tbuf;
    int tcount;
    MPI_Datatype ttype;
    int write = (flags & WM_IO_WRITE) != 0;
    int collective = shared ? (flags & WM_IO_ORDERED) != 0 : (flags & WM_IO_COLLECTIVE) != 0;
    *bytes = 0;
    int xe = wm_x32_begin(fh, write, buf, count, type, &x32, &tbuf, &tcount, &ttype);
    if (xe != WM_OK) {
        if (collective) {
            struct access_part a = {shared, flags, offset};
            return wm_x32_take_part(fh, xe, access_nothing, &a);
        }
        return xe;
    }
    int e = access_raw(fh, shared, flags, offset, tbuf, tcount, ttype, bytes);
    int e2 = wm_x32_end(&x32, write, e == WM_OK ? *bytes : 0, buf, count, type);
    return e != WM_OK ? e : e2;
}

static int io(MPI_File fh, int flags, MPI_Offset offset, void *buf, int count,
              MPI_Datatype type, MPI_Status *status)
{
    int64_t bytes = 0;
    int e = wm_access(fh, 0, flags, offset, buf, count, type, &bytes);
    if (e == WM_OK)
        set_status(status, bytes);
    return fail(fh, e);
}

/* ---- Files, errors and handles ---- */

int wm_File_open(MPI_Comm comm, const char *filename, int amode, MPI_Info info, MPI_File *fh)
{
    if (!is_weft_name(filename))
        return REAL(PMPI_File_open)(comm, filename, amode, info, fh);
    MPI_Errhandler eh = null_file_errhandler();
    wm_h out = 0;
    int e = weft_mpiio_open(H(comm), filename, amode_to_wm(amode), H(info), H(eh), &out);
    if (e != WM_OK) {
        *fh = MPI_FILE_NULL;
        return invoke(eh, MPI_FILE_NULL, mpi_code(e));
    }
    *fh = (MPI_File)out;
    return MPI_SUCCESS;
}

int wm_File_close(MPI_File *fh)
{
    if (fh == NULL || !OURS(*fh))
        return REAL(PMPI_File_close)(fh);
    MPI_File f = *fh;
    MPI_Errhandler eh = (MPI_Errhandler)weft_mpiio_errhandler(H(f));
    int e = weft_mpiio_close(H(f));
    *fh = MPI_FILE_NULL;
    return invoke(eh, MPI_FILE_NULL, mpi_code(e));
}

int wm_File_delete(const char *filename, MPI_Info info)
{
    if (!is_weft_name(filename))
        return REAL(PMPI_File_delete)(filename, info);
    return invoke(null_file_errhandler(), MPI_FILE_NULL,
                  mpi_code(weft_mpiio_delete(filename, H(info))));
}

/* MPI_Finalize: job-scoped delegates of files the program left open are stopped first
 * (they write back what they hold); a delegate still connected would hold up
 * PMPI_Finalize, which waits for every connected process. */
int wm_Finalize(void)
{
    weft_mpiio_finalize();
    return REAL(PMPI_Finalize)();
}

MPI_Fint wm_File_c2f(MPI_File fh)
{
    if (!OURS(fh))
        return REAL(PMPI_File_c2f)(fh);
    return (MPI_Fint)weft_mpiio_fint(H(fh));
}

MPI_File wm_File_f2c(MPI_Fint f)
{
    wm_h ours = weft_mpiio_from_fint((int)f);
    if (ours != 0)
        return (MPI_File)ours;
    return REAL(PMPI_File_f2c)(f);
}

int wm_File_call_errhandler(MPI_File fh, int errorcode)
{
    if (!OURS(fh))
        return REAL(PMPI_File_call_errhandler)(fh, errorcode);
    invoke((MPI_Errhandler)weft_mpiio_errhandler(H(fh)), fh, errorcode);
    return MPI_SUCCESS;
}

int wm_File_create_errhandler(MPI_File_errhandler_function *function, MPI_Errhandler *errhandler)
{
    int rc = REAL(PMPI_File_create_errhandler)(function, errhandler);
    if (rc == MPI_SUCCESS) {
        pthread_mutex_lock(&user_errhandler_lock);
        if (user_errhandler_count < USER_ERRHANDLERS_MAX) {
            user_errhandlers[user_errhandler_count].handler = *errhandler;
            user_errhandlers[user_errhandler_count].function = function;
            user_errhandler_count++;
        } else {
            fprintf(stderr, "weft-mpiio: more than %d file error handlers; later ones are not "
                            "called for weft: files\n", USER_ERRHANDLERS_MAX);
        }
        pthread_mutex_unlock(&user_errhandler_lock);
    }
    return rc;
}

int wm_File_set_errhandler(MPI_File fh, MPI_Errhandler errhandler)
{
    if (!OURS(fh))
        return REAL(PMPI_File_set_errhandler)(fh, errhandler);
    weft_mpiio_set_errhandler(H(fh), H(errhandler));
    return MPI_SUCCESS;
}

int wm_File_get_errhandler(MPI_File fh, MPI_Errhandler *errhandler)
{
    if (!OURS(fh))
        return REAL(PMPI_File_get_errhandler)(fh, errhandler);
    *errhandler = (MPI_Errhandler)weft_mpiio_errhandler(H(fh));
    return MPI_SUCCESS;
}

/* ---- Size, info, modes ---- */

int wm_File_set_size(MPI_File fh, MPI_Offset size)
{
    if (!OURS(fh))
        return REAL(PMPI_File_set_size)(fh, size);
    return fail(fh, weft_mpiio_set_size(H(fh), (int64_t)size));
}

int wm_File_preallocate(MPI_File fh, MPI_Offset size)
{
    if (!OURS(fh))
        return REAL(PMPI_File_preallocate)(fh, size);
    return fail(fh, weft_mpiio_preallocate(H(fh), (int64_t)size));
}

int wm_File_get_size(MPI_File fh, MPI_Offset *size)
{
    if (!OURS(fh))
        return REAL(PMPI_File_get_size)(fh, size);
    int64_t s = 0;
    int e = weft_mpiio_get_size(H(fh), &s);
    *size = (MPI_Offset)s;
    return fail(fh, e);
}

int wm_File_get_group(MPI_File fh, MPI_Group *group)
{
    if (!OURS(fh))
        return REAL(PMPI_File_get_group)(fh, group);
    wm_h g = 0;
    int e = weft_mpiio_get_group(H(fh), &g);
    *group = (MPI_Group)g;
    return fail(fh, e);
}

int wm_File_get_amode(MPI_File fh, int *amode)
{
    if (!OURS(fh))
        return REAL(PMPI_File_get_amode)(fh, amode);
    int m = 0;
    int e = weft_mpiio_get_amode(H(fh), &m);
    *amode = amode_from_wm(m);
    return fail(fh, e);
}

int wm_File_set_info(MPI_File fh, MPI_Info info)
{
    if (!OURS(fh))
        return REAL(PMPI_File_set_info)(fh, info);
    return fail(fh, weft_mpiio_set_info(H(fh), H(info)));
}

int wm_File_get_info(MPI_File fh, MPI_Info *info_used)
{
    if (!OURS(fh))
        return REAL(PMPI_File_get_info)(fh, info_used);
    wm_h i = 0;
    int e = weft_mpiio_get_info(H(fh), &i);
    *info_used = (MPI_Info)i;
    return fail(fh, e);
}

int wm_File_set_atomicity(MPI_File fh, int flag)
{
    if (!OURS(fh))
        return REAL(PMPI_File_set_atomicity)(fh, flag);
    return fail(fh, weft_mpiio_set_atomicity(H(fh), flag));
}

int wm_File_get_atomicity(MPI_File fh, int *flag)
{
    if (!OURS(fh))
        return REAL(PMPI_File_get_atomicity)(fh, flag);
    return fail(fh, weft_mpiio_get_atomicity(H(fh), flag));
}

int wm_File_sync(MPI_File fh)
{
    if (!OURS(fh))
        return REAL(PMPI_File_sync)(fh);
    return fail(fh, weft_mpiio_sync(H(fh)));
}

/* ---- Views and file pointers ---- */

int wm_File_set_view(MPI_File fh, MPI_Offset disp, MPI_Datatype etype, MPI_Datatype filetype,
                     const char *datarep, MPI_Info info)
{
    if (!OURS(fh))
        return REAL(PMPI_File_set_view)(fh, disp, etype, filetype, datarep, info);
    return fail(fh, weft_mpiio_set_view(H(fh), (int64_t)disp, H(etype), H(filetype), datarep,
                                        H(info)));
}

int wm_File_get_view(MPI_File fh, MPI_Offset *disp, MPI_Datatype *etype, MPI_Datatype *filetype,
                     char *datarep)
{
    if (!OURS(fh))
        return REAL(PMPI_File_get_view)(fh, disp, etype, filetype, datarep);
    int64_t d = 0;
    wm_h e_type = 0, f_type = 0;
    int e = weft_mpiio_get_view(H(fh), &d, &e_type, &f_type, datarep);
    *disp = (MPI_Offset)d;
    *etype = (MPI_Datatype)e_type;
    *filetype = (MPI_Datatype)f_type;
    return fail(fh, e);
}

int wm_File_get_type_extent(MPI_File fh, MPI_Datatype datatype, MPI_Aint *extent)
{
    if (!OURS(fh))
        return REAL(PMPI_File_get_type_extent)(fh, datatype, extent);
    int64_t x = 0;
    int e = weft_mpiio_get_type_extent(H(fh), H(datatype), &x);
    *extent = (MPI_Aint)x;
    return fail(fh, e);
}

static int whence_to_wm(int whence)
{
    if (whence == MPI_SEEK_SET) return 0;
    if (whence == MPI_SEEK_CUR) return 1;
    if (whence == MPI_SEEK_END) return 2;
    return -1;
}

int wm_File_seek(MPI_File fh, MPI_Offset offset, int whence)
{
    if (!OURS(fh))
        return REAL(PMPI_File_seek)(fh, offset, whence);
    return fail(fh, weft_mpiio_seek(H(fh), (int64_t)offset, whence_to_wm(whence)));
}

int wm_File_get_position(MPI_File fh, MPI_Offset *offset)
{
    if (!OURS(fh))
        return REAL(PMPI_File_get_position)(fh, offset);
    int64_t o = 0;
    int e = weft_mpiio_get_position(H(fh), &o);
    *offset = (MPI_Offset)o;
    return fail(fh, e);
}

int wm_File_get_byte_offset(MPI_File fh, MPI_Offset offset, MPI_Offset *disp)
{
    if (!OURS(fh))
        return REAL(PMPI_File_get_byte_offset)(fh, offset, disp);
    int64_t d = 0;
    int e = weft_mpiio_get_byte_offset(H(fh), (int64_t)offset, &d);
    *disp = (MPI_Offset)d;
    return fail(fh, e);
}

/* ---- Data access: explicit offsets and individual file pointers ---- */

int wm_File_read_at(MPI_File fh, MPI_Offset offset, void *buf, int count, MPI_Datatype datatype,
                    MPI_Status *status)
{
    if (!OURS(fh))
        return REAL(PMPI_File_read_at)(fh, offset, buf, count, datatype, status);
    return io(fh, WM_IO_EXPLICIT_OFFSET, offset, buf, count, datatype, status);
}

int wm_File_read_at_all(MPI_File fh, MPI_Offset offset, void *buf, int count,
                        MPI_Datatype datatype, MPI_Status *status)
{
    if (!OURS(fh))
        return REAL(PMPI_File_read_at_all)(fh, offset, buf, count, datatype, status);
    return io(fh, WM_IO_EXPLICIT_OFFSET | WM_IO_COLLECTIVE, offset, buf, count, datatype, status);
}

int wm_File_write_at(MPI_File fh, MPI_Offset offset, const void *buf, int count,
                     MPI_Datatype datatype, MPI_Status *status)
{
    if (!OURS(fh))
        return REAL(PMPI_File_write_at)(fh, offset, buf, count, datatype, status);
    return io(fh, WM_IO_EXPLICIT_OFFSET | WM_IO_WRITE, offset, (void *)buf, count, datatype,
              status);
}

int wm_File_write_at_all(MPI_File fh, MPI_Offset offset, const void *buf, int count,
                         MPI_Datatype datatype, MPI_Status *status)
{
    if (!OURS(fh))
        return REAL(PMPI_File_write_at_all)(fh, offset, buf, count, datatype, status);
    return io(fh, WM_IO_EXPLICIT_OFFSET | WM_IO_WRITE | WM_IO_COLLECTIVE, offset, (void *)buf,
              count, datatype, status);
}

int wm_File_read(MPI_File fh, void *buf, int count, MPI_Datatype datatype, MPI_Status *status)
{
    if (!OURS(fh))
        return REAL(PMPI_File_read)(fh, buf, count, datatype, status);
    return io(fh, 0, 0, buf, count, datatype, status);
}

int wm_File_read_all(MPI_File fh, void *buf, int count, MPI_Datatype datatype,
                     MPI_Status *status)
{
    if (!OURS(fh))
        return REAL(PMPI_File_read_all)(fh, buf, count, datatype, status);
    return io(fh, WM_IO_COLLECTIVE, 0, buf, count, datatype, status);
}

int wm_File_write(MPI_File fh, const void *buf, int count, MPI_Datatype datatype,
                  MPI_Status *status)
{
    if (!OURS(fh))
        return REAL(PMPI_File_write)(fh, buf, count, datatype, status);
    return io(fh, WM_IO_WRITE, 0, (void *)buf, count, datatype, status);
}

int wm_File_write_all(MPI_File fh, const void *buf, int count, MPI_Datatype datatype,
                      MPI_Status *status)
{
    if (!OURS(fh))
        return REAL(PMPI_File_write_all)(fh, buf, count, datatype, status);
    return io(fh, WM_IO_WRITE | WM_IO_COLLECTIVE, 0, (void *)buf, count, datatype, status);
}

/* ---- For requests.c: nonblocking, split collective and shared file pointer calls
 * live there. ---- */

int wm_fail(MPI_File fh, int werr)
{
    return fail(fh, werr);
}

int wm_mpi_class(int werr)
{
    return mpi_class(werr);
}
