/* The MPI library's own PMPI_* functions. libweft_mpiio.so defines PMPI_File_* (and
 * the request completion calls) itself, so that Fortran bindings and profiling tools,
 * which call the PMPI names, reach Weft too; a pass-through to the MPI library must
 * then not call those names directly (it would call itself). REAL(PMPI_x) is the next
 * definition of PMPI_x after this library, the MPI library's, found once per call
 * site with dlsym(RTLD_NEXT). */
#ifndef WEFT_MPIIO_REAL_H
#define WEFT_MPIIO_REAL_H

/* The address of the MPI library's `name`; aborts with a message when there is none
 * other than ours (this library loaded after the MPI library, e.g. by dlopen). */
void *wm_real_symbol(const char *name);

#define REAL(fn)                                                                    \
    (__extension__({                                                                \
        static __typeof__(&fn) wm_real_p_;                                          \
        __typeof__(&fn) wm_real_q_ = __atomic_load_n(&wm_real_p_, __ATOMIC_ACQUIRE); \
        if (wm_real_q_ == NULL) {                                                   \
            wm_real_q_ = (__typeof__(&fn))wm_real_symbol(#fn);                      \
            __atomic_store_n(&wm_real_p_, wm_real_q_, __ATOMIC_RELEASE);            \
        }                                                                           \
        wm_real_q_;                                                                 \
    }))

#endif
