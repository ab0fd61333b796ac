/* Bad input through the C ABI (tests/capi/test_capi.py runs it and compares every line with the
 * Python API's answer to the same mistake): each case prints "case <name> <code> <message>". The
 * program must survive them all and print "survived". */
#include <stdio.h>
#include <stdint.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_kl_div_backward.h"

static void report(const char *name, int code)
{
    printf("case %s %d %s\n", name, code, aclGetRecentErrMsg());
}

static void report_null(const char *name, const void *result)
{
    printf("case %s %d %s\n", name, result == NULL ? -1 : 0, result == NULL ? aclGetRecentErrMsg() : "");
}

int main(void)
{
    int64_t dims[2] = {2, 3}, scalarDims[1] = {1};
    void *buf[4] = {NULL, NULL, NULL, NULL};
    aclTensor *t[4];
    aclrtStream stream = NULL, deadStream = NULL;
    uint64_t ws = 0;
    aclOpExecutor *ex = NULL;
    int local = 0, i;
    float ones[6] = {1, 1, 1, 1, 1, 1};

    aclInit(NULL);
    aclrtSetDevice(0);
    aclrtCreateStream(&stream);
    for (i = 0; i < 4; i++) {
        aclrtMalloc(&buf[i], 64, ACL_MEM_MALLOC_HUGE_FIRST);
        aclrtMemcpy(buf[i], 64, ones, sizeof(ones), ACL_MEMCPY_HOST_TO_DEVICE);
        t[i] = aclCreateTensor(i == 0 ? scalarDims : dims, i == 0 ? 0 : 2, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND,
                               i == 0 ? scalarDims : dims, i == 0 ? 0 : 2, buf[i]);
    }

    report_null("create_null_dims", aclCreateTensor(NULL, 2, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, dims, 2, buf[1]));
    report_null("create_bad_dtype", aclCreateTensor(dims, 2, (aclDataType)99, NULL, 0, ACL_FORMAT_ND, dims, 2, buf[1]));
    report_null("create_bad_format", aclCreateTensor(dims, 2, ACL_FLOAT, NULL, 0, (aclFormat)77, dims, 2, buf[1]));
    report_null("create_negative_dim", aclCreateTensor((int64_t[]){2, -3}, 2, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND,
                                                       NULL, 0, buf[1]));
    report_null("int_array_null", aclCreateIntArray(NULL, 3));

    report("null_self", aclnnKlDivBackwardGetWorkspaceSize(t[0], NULL, t[2], 1, false, t[3], &ws, &ex));
    report("null_workspace_size_out", aclnnKlDivBackwardGetWorkspaceSize(t[0], t[1], t[2], 1, false, t[3], NULL, &ex));
    report("null_executor_out", aclnnKlDivBackwardGetWorkspaceSize(t[0], t[1], t[2], 1, false, t[3], &ws, NULL));
    report("never_created_tensor", aclnnKlDivBackwardGetWorkspaceSize(t[0], (aclTensor *)(uintptr_t)0x1230, t[2], 1,
                                                                      false, t[3], &ws, &ex));
    report("bad_reduction", aclnnKlDivBackwardGetWorkspaceSize(t[0], t[1], t[2], 7, false, t[3], &ws, &ex));

    /* an executor run twice (not repeatable) */
    report("first_run_phase1", aclnnKlDivBackwardGetWorkspaceSize(t[0], t[1], t[2], 1, false, t[3], &ws, &ex));
    report("first_run", aclnnKlDivBackward(NULL, ws, ex, stream));
    report("executor_used_twice", aclnnKlDivBackward(NULL, ws, ex, stream));
    report("destroy_spent_executor", aclDestroyAclOpExecutor(ex));
    report("executor_used_after_destroy", aclnnKlDivBackward(NULL, ws, ex, stream));
    report("null_executor", aclnnKlDivBackward(NULL, 0, NULL, stream));
    report("never_created_executor", aclnnKlDivBackward(NULL, 0, (aclOpExecutor *)(uintptr_t)0x4560, stream));
    report("repeatable_null", aclSetAclOpExecutorRepeatable(NULL));
    report("repeatable_never_created", aclSetAclOpExecutorRepeatable((aclOpExecutor *)(uintptr_t)0x4560));
    report("destroy_executor_null", aclDestroyAclOpExecutor(NULL));

    /* a destroyed tensor handle */
    report("destroy_tensor", aclDestroyTensor(t[1]));
    report("destroyed_tensor", aclnnKlDivBackwardGetWorkspaceSize(t[0], t[1], t[2], 1, false, t[3], &ws, &ex));
    report("destroy_tensor_twice", aclDestroyTensor(t[1]));
    report("destroy_tensor_null", aclDestroyTensor(NULL));

    /* the runtime */
    report("free_foreign", aclrtFree(&local));
    report("free_null", aclrtFree(NULL));
    report("malloc_null_out", aclrtMalloc(NULL, 16, ACL_MEM_MALLOC_HUGE_FIRST));
    report("malloc_zero", aclrtMalloc(&buf[0], 0, ACL_MEM_MALLOC_HUGE_FIRST));
    report("memcpy_too_long", aclrtMemcpy(buf[2], 64, ones, 128, ACL_MEMCPY_HOST_TO_DEVICE));
    report("memcpy_foreign_device", aclrtMemcpy(&local, 4, ones, 4, ACL_MEMCPY_HOST_TO_DEVICE));
    report("memcpy_bad_kind", aclrtMemcpy(buf[2], 64, ones, 4, (aclrtMemcpyKind)9));
    report("memcpy_null_src", aclrtMemcpy(buf[2], 64, NULL, 4, ACL_MEMCPY_HOST_TO_DEVICE));
    report("stream_create_null_out", aclrtCreateStream(NULL));
    aclrtCreateStream(&deadStream);
    aclrtDestroyStream(deadStream);
    report("destroyed_stream_sync", aclrtSynchronizeStream(deadStream));
    report("destroyed_stream_destroy", aclrtDestroyStream(deadStream));
    report("never_created_stream", aclrtSynchronizeStream((aclrtStream)(uintptr_t)0x7890));
    report("never_created_event", aclrtSynchronizeEvent((aclrtEvent)(uintptr_t)0x7890));
    report("set_device_99", aclrtSetDevice(99));

    printf("survived\n");
    return 0;
}
