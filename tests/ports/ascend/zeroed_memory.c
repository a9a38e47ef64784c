/* A test stand-in for a vendor runtime whose fresh device memory is not poisoned: interposes
 * aclrtMalloc (listed before the port and the emulator's runtime, its aclrtMalloc is the one the
 * adapter calls), takes the block from the emulator's runtime and zero-fills it, as memory that
 * last held zeros would be. Not a port: it exports nothing else. RUNTIME_PATH names the runtime. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <string.h>

#include "acl/acl.h"

typedef aclError (*malloc_fn)(void **, size_t, aclrtMemMallocPolicy);

__attribute__((visibility("default"))) aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy)
{
    static malloc_fn real;
    if (!real) {
        void *rt = dlopen(RUNTIME_PATH, RTLD_NOW | RTLD_GLOBAL);
        real = rt ? (malloc_fn)dlsym(rt, "aclrtMalloc") : NULL;
        if (!real)
            return ACL_ERROR_INVALID_PARAM;
    }
    aclError st = real(devPtr, size, policy);
    if (st == ACL_SUCCESS && devPtr && *devPtr)
        memset(*devPtr, 0, size); /* the emulator's device memory is host memory */
    return st;
}
