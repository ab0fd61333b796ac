/* Memory growth through the C ABI: argv[1] create / run / destroy cycles (aclrtMalloc, aclrtMemcpy,
 * aclCreateTensor, aclCreateIntArray, GetWorkspaceSize, a repeatable executor run twice and destroyed,
 * a single-use executor, stream and event create/destroy, aclrtFree). Prints the RSS after a warm-up
 * of a tenth of the cycles and at the end ("rss <warm kB> <end kB>"). */
#include <stdio.h>
#include <stdlib.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_kl_div_backward.h"

static long rss_kb(void)
{
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f != NULL) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
        fclose(f);
    }
    return resident * 4;
}

#define OK(call) do { int r_ = (int)(call); if (r_ != 0) { printf("%s: %d %s\n", #call, r_, aclGetRecentErrMsg()); return 1; } } while (0)

int main(int argc, char **argv)
{
    long cycles = argc > 1 ? atol(argv[1]) : 10000, warm = cycles / 10, c, warmRss = 0;
    aclrtStream stream;
    aclInit(NULL);
    OK(aclrtSetDevice(0));
    OK(aclrtCreateStream(&stream));
    for (c = 0; c < cycles; c++) {
        float host[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        int64_t dims[1] = {8}, lengths[3] = {1, 2, 3};
        void *d[4];
        aclTensor *t[4];
        aclIntArray *array;
        aclOpExecutor *ex;
        uint64_t ws;
        aclrtStream s2;
        aclrtEvent e;
        int i;
        if (c == warm) warmRss = rss_kb();
        for (i = 0; i < 4; i++) {
            OK(aclrtMalloc(&d[i], 32, ACL_MEM_MALLOC_HUGE_FIRST));
            OK(aclrtMemcpy(d[i], 32, host, 32, ACL_MEMCPY_HOST_TO_DEVICE));
            t[i] = aclCreateTensor(dims, i == 0 ? 0 : 1, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, dims, i == 0 ? 0 : 1, d[i]);
        }
        array = aclCreateIntArray(lengths, 3);
        OK(aclnnKlDivBackwardGetWorkspaceSize(t[0], t[1], t[2], 1, false, t[3], &ws, &ex));
        OK(aclSetAclOpExecutorRepeatable(ex));
        OK(aclnnKlDivBackward(NULL, 0, ex, stream));
        OK(aclnnKlDivBackward(NULL, 0, ex, stream));
        OK(aclDestroyAclOpExecutor(ex));
        OK(aclnnKlDivBackwardGetWorkspaceSize(t[0], t[1], t[2], 2, false, t[3], &ws, &ex));
        OK(aclnnKlDivBackward(NULL, 0, ex, stream));
        OK(aclrtSynchronizeStream(stream));
        OK(aclrtMemcpy(host, 32, d[3], 32, ACL_MEMCPY_DEVICE_TO_HOST));
        if (c % 100 == 0) {
            OK(aclrtCreateStream(&s2));
            OK(aclrtCreateEvent(&e));
            OK(aclrtRecordEvent(e, s2));
            OK(aclrtSynchronizeEvent(e));
            OK(aclrtDestroyEvent(e));
            OK(aclrtDestroyStream(s2));
        }
        for (i = 0; i < 4; i++) {
            OK(aclDestroyTensor(t[i]));
            OK(aclrtFree(d[i]));
        }
        OK(aclDestroyIntArray(array));
    }
    printf("rss %ld %ld\n", warmRss, rss_kb());
    OK(aclrtDestroyStream(stream));
    aclFinalize();
    return 0;
}
