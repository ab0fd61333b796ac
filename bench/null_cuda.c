/* The null libcuda.so.1 of the launch-path bench (bench/launch_paths.py): the driver entry points that
 * cuda-bindings' `driver` module and cuda.core reach on their way to a kernel launch, each returning
 * CUDA_SUCCESS at once with non-null handles, so a timed launch costs exactly those libraries' Python-side
 * argument handling. cuGetProcAddress (how cuda-bindings resolves the driver) answers every other name
 * with an entry that returns 0. CuPy cannot run over it: its static CUDA runtime needs the driver's
 * private export tables. Never a driver to compute with. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>

typedef unsigned long long u64;
static void *const context = (void *)0x10, *const stream = (void *)0x20, *const library = (void *)0x30,
                  *const kernel = (void *)0x40;

static int null_entry(void) { return 0; }

int cuInit(unsigned flags) { (void)flags; return 0; }
int cuDriverGetVersion(int *version) { *version = 13000; return 0; }
int cuDeviceGetCount(int *count) { *count = 1; return 0; }
int cuDeviceGet(int *device, int ordinal) { *device = ordinal; return 0; }
int cuDeviceGetAttribute(int *value, int attribute, int device) { (void)attribute; (void)device; *value = 9; return 0; }
int cuDevicePrimaryCtxRetain(void **ctx, int device) { (void)device; *ctx = context; return 0; }
int cuCtxGetCurrent(void **ctx) { *ctx = context; return 0; }
int cuCtxGetDevice(int *device) { *device = 0; return 0; }
int cuStreamCreate(void **s, unsigned flags) { (void)flags; *s = stream; return 0; }
int cuStreamCreateWithPriority(void **s, unsigned flags, int priority) { (void)flags; (void)priority; *s = stream; return 0; }
int cuLibraryLoadData(void **lib, const void *code, void *jit_options, void *jit_values, unsigned jit_count,
                      void *lib_options, void *lib_values, unsigned lib_count)
{
    (void)code; (void)jit_options; (void)jit_values; (void)jit_count; (void)lib_options; (void)lib_values;
    (void)lib_count;
    *lib = library;
    return 0;
}
int cuLibraryGetKernel(void **k, void *lib, const char *name) { (void)lib; (void)name; *k = kernel; return 0; }

int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, void *hstream, void **params, void **extra)
{
    (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shared; (void)hstream;
    (void)params; (void)extra;
    return 0;
}
int cuLaunchKernelEx(const void *config, void *f, void **params, void **extra)
{ (void)config; (void)f; (void)params; (void)extra; return 0; }

int cuGetProcAddress_v2(const char *symbol, void **pfn, int version, u64 flags, int *status)
{
    (void)version; (void)flags;
    void *p = dlsym(RTLD_DEFAULT, symbol);
    *pfn = p ? p : (void *)null_entry;
    if (status) *status = 0;
    return 0;
}
int cuGetProcAddress(const char *symbol, void **pfn, int version, u64 flags)
{ return cuGetProcAddress_v2(symbol, pfn, version, flags, 0); }
