/* wm_real_symbol: see real.h. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "real.h"

void *wm_real_symbol(const char *name)
{
    void *p = dlsym(RTLD_NEXT, name);
    if (p == NULL) {
        /* Loaded before nothing that defines it: take the global definition, unless
         * it is ours. */
        Dl_info mine, found;
        void *q = dlsym(RTLD_DEFAULT, name);
        if (q != NULL && dladdr((void *)&wm_real_symbol, &mine) && dladdr(q, &found) &&
            mine.dli_fbase != found.dli_fbase)
            p = q;
    }
    if (p == NULL) {
        fprintf(stderr,
                "weft-mpiio: the MPI library's %s was not found after libweft_mpiio.so "
                "(load libweft_mpiio.so with LD_PRELOAD or link it before -lmpi)\n",
                name);
        abort();
    }
    return p;
}
