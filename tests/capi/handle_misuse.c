/* Every handle kind of the C ABI misused as a hostile caller would, and sizes no allocation can
 * hold (tests/capi/test_capi_handle_misuse.py builds it as C and as C++, with -fsanitize=address, and
 * checks every line). Each case prints "case <kind> <what> <code> <message>": destroyed with NULL,
 * forged (an address the library never returned, aligned like its handles or not, a pointer to the
 * caller's own stack), given to the destroy of every other kind, destroyed twice and used after its
 * destroy; "alive <kind> <code>" says the handle still works after the wrong destroys. The program
 * must survive them all and print "survived". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "acl/acl.h"
#include "aclnn/acl_meta.h"
#include "aclnnop/aclnn_kl_div_backward.h"
#include "hccl/hccl.h"

typedef int (*destroy_fn)(void *);
typedef int (*use_fn)(void *);
typedef void *(*make_fn)(void);

static void *buffer(void)
{
    void *p = NULL;
    aclrtMalloc(&p, 64, ACL_MEM_MALLOC_HUGE_FIRST);
    return p;
}

static aclTensor *tensor(void)
{
    int64_t dims[2] = {2, 3};
    return aclCreateTensor(dims, 2, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, dims, 2, buffer());
}

/* makers */
static void *m_tensor(void) { return tensor(); }
static void *m_scalar(void) { float v = 1.5f; return aclCreateScalar(&v, ACL_FLOAT); }
static void *m_int_array(void) { int64_t v[2] = {1, 2}; return aclCreateIntArray(v, 2); }
static void *m_float_array(void) { float v[1] = {1.0f}; return aclCreateFloatArray(v, 1); }
static void *m_bool_array(void) { bool v[1] = {true}; return aclCreateBoolArray(v, 1); }
static void *m_tensor_list(void) { const aclTensor *t[1]; t[0] = tensor(); return aclCreateTensorList(t, 1); }
static void *m_scalar_list(void)
{
    int32_t v = 1;
    const aclScalar *s[1];
    s[0] = aclCreateScalar(&v, ACL_INT32);
    return aclCreateScalarList(s, 1);
}
static void *m_executor(void)
{
    uint64_t ws = 0;
    aclOpExecutor *ex = NULL;
    aclnnKlDivBackwardGetWorkspaceSize(tensor(), tensor(), tensor(), 1, false, tensor(), &ws, &ex);
    return ex;
}
static void *m_stream(void) { aclrtStream s = NULL; aclrtCreateStream(&s); return s; }
static void *m_event(void) { aclrtEvent e = NULL; aclrtCreateEvent(&e); return e; }
static void *m_context(void) { aclrtContext c = NULL; aclrtCreateContext(&c, 0); return c; }
static void *m_model(void)
{
    aclrtStream s = NULL;
    aclmdlRI model = NULL;
    void *p = buffer();
    aclrtCreateStream(&s);
    aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL);
    aclrtMemsetAsync(p, 64, 1, 64, s);
    aclmdlRICaptureEnd(s, &model);
    return model;
}
static void *m_comm(void)
{
    HcclRootInfo root;
    HcclComm comm = NULL;
    HcclGetRootInfo(&root);
    HcclCommInitRootInfo(1, &root, 0, &comm);
    return comm;
}

/* destroys (every one takes the handle as a plain pointer: a C caller's cast) */
static int d_tensor(void *h) { return aclDestroyTensor((const aclTensor *)h); }
static int d_scalar(void *h) { return aclDestroyScalar((const aclScalar *)h); }
static int d_int_array(void *h) { return aclDestroyIntArray((const aclIntArray *)h); }
static int d_float_array(void *h) { return aclDestroyFloatArray((const aclFloatArray *)h); }
static int d_bool_array(void *h) { return aclDestroyBoolArray((const aclBoolArray *)h); }
static int d_tensor_list(void *h) { return aclDestroyTensorList((const aclTensorList *)h); }
static int d_scalar_list(void *h) { return aclDestroyScalarList((const aclScalarList *)h); }
static int d_executor(void *h) { return aclDestroyAclOpExecutor((aclOpExecutor *)h); }
static int d_stream(void *h) { return aclrtDestroyStream((aclrtStream)h); }
static int d_event(void *h) { return aclrtDestroyEvent((aclrtEvent)h); }
static int d_context(void *h) { return aclrtDestroyContext((aclrtContext)h); }
static int d_model(void *h) { return aclmdlRIDestroy((aclmdlRI)h); }
static int d_comm(void *h) { return HcclCommDestroy((HcclComm)h); }

/* uses */
static int u_tensor(void *h) { int64_t o = 0; return aclGetViewOffset((const aclTensor *)h, &o); }
static int u_scalar(void *h)
{
    const aclScalar *s[1];
    aclScalarList *list;
    s[0] = (const aclScalar *)h;
    list = aclCreateScalarList(s, 1);
    return list == NULL ? ACLNN_ERR_PARAM_INVALID : 0;   /* (the list is left alive: it owns the scalar) */
}
static int u_int_array(void *h) { uint64_t n = 0; return aclGetIntArraySize((const aclIntArray *)h, &n); }
static int u_float_array(void *h) { uint64_t n = 0; return aclGetFloatArraySize((const aclFloatArray *)h, &n); }
static int u_bool_array(void *h) { uint64_t n = 0; return aclGetBoolArraySize((const aclBoolArray *)h, &n); }
static int u_tensor_list(void *h) { uint64_t n = 0; return aclGetTensorListSize((const aclTensorList *)h, &n); }
static int u_scalar_list(void *h) { uint64_t n = 0; return aclGetScalarListSize((const aclScalarList *)h, &n); }
static int u_executor(void *h) { return aclSetAclOpExecutorRepeatable((aclOpExecutor *)h); }
static int u_stream(void *h) { return aclrtSynchronizeStream((aclrtStream)h); }
static int u_event(void *h) { aclrtEventRecordedStatus s; return aclrtQueryEventStatus((aclrtEvent)h, &s); }
static int u_context(void *h) { return aclrtSetCurrentContext((aclrtContext)h); }
static int u_model(void *h)
{
    int ret = aclmdlRIExecuteAsync((aclmdlRI)h, NULL);
    return ret != 0 ? ret : aclrtSynchronizeStream(NULL);
}
static int u_comm(void *h) { uint32_t n = 0; return HcclGetRankSize((HcclComm)h, &n); }

struct kind {
    const char *name;
    make_fn make;
    destroy_fn destroy;
    use_fn use;
};

static const struct kind KINDS[] = {
    {"tensor", m_tensor, d_tensor, u_tensor},
    {"scalar", m_scalar, d_scalar, u_scalar},
    {"int_array", m_int_array, d_int_array, u_int_array},
    {"float_array", m_float_array, d_float_array, u_float_array},
    {"bool_array", m_bool_array, d_bool_array, u_bool_array},
    {"tensor_list", m_tensor_list, d_tensor_list, u_tensor_list},
    {"scalar_list", m_scalar_list, d_scalar_list, u_scalar_list},
    {"executor", m_executor, d_executor, u_executor},
    {"stream", m_stream, d_stream, u_stream},
    {"event", m_event, d_event, u_event},
    {"context", m_context, d_context, u_context},
    {"model", m_model, d_model, u_model},
    {"hccl_comm", m_comm, d_comm, u_comm},
};
#define N_KINDS (sizeof(KINDS) / sizeof(KINDS[0]))

static void report(const char *kind, const char *what, int code)
{
    printf("case %s %s %d %s\n", kind, what, code, code == 0 ? "" : aclGetRecentErrMsg());
}

static void release(int64_t *values)
{
#ifdef __cplusplus
    delete[] values;   /* CANN's rule: the arrays are new[]'d (acl_meta.h) */
#else
    (void)values;      /* (a C caller free()s them: not under ASan's alloc/dealloc check, see the test) */
#endif
}

int main(void)
{
    size_t k, j;
    int local = 0;
    void *forged[3];
    void *dst, *src, *host = NULL;
    int64_t v[2] = {1, 2}, *values = NULL;
    uint64_t n = 0;
    float f[1] = {1.0f};
    bool b[1] = {true};
    const aclTensor *tensors[1];
    aclTensor *t;
    forged[0] = (void *)(uintptr_t)0x5A0000123450ULL;   /* aligned like a handle, never returned */
    forged[1] = (void *)(uintptr_t)0x1234567ULL;        /* unaligned */
    forged[2] = &local;                                 /* the caller's own memory */

    setvbuf(stdout, NULL, _IOLBF, 0);   /* every line out before a sanitizer report could end the run */
    aclInit(NULL);
    aclrtSetDevice(0);
    for (k = 0; k < N_KINDS; k++) {
        const struct kind *K = &KINDS[k];
        void *h;
        int i;
        report(K->name, "null", K->destroy(NULL));
        for (i = 0; i < 3; i++)
            report(K->name, i == 0 ? "forged_aligned" : i == 1 ? "forged_unaligned" : "forged_stack",
                   K->destroy(forged[i]));
        h = K->make();
        if (h == NULL) {
            printf("make %s failed: %s\n", K->name, aclGetRecentErrMsg());
            continue;
        }
        for (j = 0; j < N_KINDS; j++)
            if (j != k) {
                char what[64];
                snprintf(what, sizeof(what), "given_to_%s", KINDS[j].name);
                report(K->name, what, KINDS[j].destroy(h));
            }
        printf("alive %s %d\n", K->name, K->use(h));
        report(K->name, "destroy", K->destroy(h));
        report(K->name, "destroyed_twice", K->destroy(h));
        report(K->name, "used_after_destroy", K->use(h));
    }

    /* sizes no allocation can hold */
    dst = buffer();
    src = buffer();
    report("size", "malloc_size_max", aclrtMalloc(&host, SIZE_MAX, ACL_MEM_MALLOC_HUGE_FIRST));
    report("size", "malloc_host_size_max", aclrtMallocHost(&host, SIZE_MAX));
    report("size", "memcpy_d2d_count_max", aclrtMemcpy(dst, 64, src, SIZE_MAX, ACL_MEMCPY_DEVICE_TO_DEVICE));
    report("size", "memcpy_h2d_count_max", aclrtMemcpy(dst, SIZE_MAX, f, SIZE_MAX, ACL_MEMCPY_HOST_TO_DEVICE));
    report("size", "memcpy_d2h_count_max", aclrtMemcpy(f, SIZE_MAX, src, SIZE_MAX, ACL_MEMCPY_DEVICE_TO_HOST));
    report("size", "memset_count_max", aclrtMemset(dst, SIZE_MAX, 0, SIZE_MAX));
    report("size", "memcpy2d_height_2_61", aclrtMemcpy2d(dst, 8, src, 8, 8, (size_t)1 << 61,
                                                         ACL_MEMCPY_DEVICE_TO_DEVICE));
    report("size", "memcpy2d_h2d_height_2_61", aclrtMemcpy2d(dst, 8, f, 8, 8, (size_t)1 << 61,
                                                             ACL_MEMCPY_HOST_TO_DEVICE));
    report("size", "memcpy2d_width_max", aclrtMemcpy2d(dst, SIZE_MAX, src, SIZE_MAX, SIZE_MAX, 1,
                                                       ACL_MEMCPY_DEVICE_TO_DEVICE));
    report("size", "int_array_uint64_max", aclCreateIntArray(v, UINT64_MAX) == NULL ? -1 : 0);
    report("size", "float_array_uint64_max", aclCreateFloatArray(f, UINT64_MAX) == NULL ? -1 : 0);
    report("size", "bool_array_uint64_max", aclCreateBoolArray(b, UINT64_MAX) == NULL ? -1 : 0);
    t = tensor();
    tensors[0] = t;
    report("size", "tensor_list_uint64_max", aclCreateTensorList(tensors, UINT64_MAX) == NULL ? -1 : 0);

    /* the shape arrays, released as the header says */
    report("shape", "view_shape", aclGetViewShape(t, &values, &n));
#ifdef __cplusplus
    release(values);
    report("shape", "view_strides", aclGetViewStrides(t, &values, &n));
    release(values);
    report("shape", "storage_shape", aclGetStorageShape(t, &values, &n));
    release(values);
#else
    release(values);
#endif
    aclDestroyTensor(t);
    aclrtFree(dst);
    aclrtFree(src);
    aclrtResetDevice(0);
    aclFinalize();
    printf("survived\n");
    return 0;
}
