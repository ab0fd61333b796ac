// The common helpers of the C++ sample programs beside this file, as CANN's samples have them:
// CHECK_RET / LOG_PRINT, GetShapeSize, Init (aclInit, aclrtSetDevice, aclrtCreateStream),
// CreateAclTensor (aclrtMalloc + aclrtMemcpy host to device + contiguous strides + aclCreateTensor),
// MallocWorkspace, CopyToHost (aclrtMemcpy device to host, print every element), Finalize, and
// PrintInput / Uniform (the inputs are printed so that tests/capi can check the results against
// PyTorch). Only acl/acl.h and aclnn/acl_meta.h are used here: what a CANN program has.
#ifndef ACLNN_GPU_EXAMPLES_ACL_SAMPLE_H_
#define ACLNN_GPU_EXAMPLES_ACL_SAMPLE_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "aclnn/acl_meta.h"

#define LOG_PRINT(message, ...) \
    do {                        \
        printf(message, ##__VA_ARGS__); \
    } while (0)

// On failure: print the message and aclGetRecentErrMsg(), then run return_expr (CANN's macro, plus the message).
#define CHECK_RET(cond, return_expr)                                       \
    do {                                                                   \
        if (!(cond)) {                                                     \
            LOG_PRINT("  aclGetRecentErrMsg: %s\n", aclGetRecentErrMsg()); \
            return_expr;                                                   \
        }                                                                  \
    } while (0)

inline int64_t GetShapeSize(const std::vector<int64_t> &shape)
{
    int64_t size = 1;
    for (int64_t dim : shape) {
        size *= dim;
    }
    return size;
}

inline int Init(int32_t deviceId, aclrtStream *stream)
{
    auto ret = aclInit(nullptr);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclInit failed. ERROR: %d\n", ret); return ret);
    ret = aclrtSetDevice(deviceId);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSetDevice failed. ERROR: %d\n", ret); return ret);
    ret = aclrtCreateStream(stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtCreateStream failed. ERROR: %d\n", ret); return ret);
    return 0;
}

// The byte size comes from the host element type, which each sample matches to its aclDataType.
template <typename T>
int CreateAclTensor(const std::vector<T> &hostData, const std::vector<int64_t> &shape, void **deviceAddr,
                    aclDataType dataType, aclTensor **tensor)
{
    auto size = GetShapeSize(shape) * sizeof(T);
    auto ret = aclrtMalloc(deviceAddr, size > 0 ? size : 1, ACL_MEM_MALLOC_HUGE_FIRST);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtMalloc failed. ERROR: %d\n", ret); return ret);
    ret = aclrtMemcpy(*deviceAddr, size, hostData.data(), size, ACL_MEMCPY_HOST_TO_DEVICE);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtMemcpy failed. ERROR: %d\n", ret); return ret);
    std::vector<int64_t> strides(shape.size(), 1);
    for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; i--) {
        strides[i] = shape[i + 1] * strides[i + 1];
    }
    *tensor = aclCreateTensor(shape.data(), shape.size(), dataType, strides.data(), 0, ACL_FORMAT_ND, shape.data(),
                              shape.size(), *deviceAddr);
    CHECK_RET(*tensor != nullptr, LOG_PRINT("aclCreateTensor failed.\n"); return ACL_ERROR_BAD_ALLOC);
    return 0;
}

inline int MallocWorkspace(uint64_t workspaceSize, void **workspaceAddr)
{
    *workspaceAddr = nullptr;
    if (workspaceSize > 0) {
        auto ret = aclrtMalloc(workspaceAddr, workspaceSize, ACL_MEM_MALLOC_HUGE_FIRST);
        CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("allocate workspace failed. ERROR: %d\n", ret); return ret);
    }
    return 0;
}

template <typename T>
int CopyToHost(const void *deviceAddr, const std::vector<int64_t> &shape, const char *name)
{
    auto size = GetShapeSize(shape);
    std::vector<T> resultData(size, 0);
    auto ret = aclrtMemcpy(resultData.data(), size * sizeof(T), deviceAddr, size * sizeof(T),
                           ACL_MEMCPY_DEVICE_TO_HOST);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("copy %s from device to host failed. ERROR: %d\n", name, ret); return ret);
    for (int64_t i = 0; i < size; i++) {
        LOG_PRINT("%s[%ld] is: %.9g\n", name, static_cast<long>(i), static_cast<double>(resultData[i]));
    }
    return 0;
}

// "input <name> <shape> : v0 v1 ..." (what the test feeds to PyTorch)
template <typename T>
void PrintInput(const char *name, const std::vector<int64_t> &shape, const std::vector<T> &data)
{
    std::string dims;
    for (size_t i = 0; i < shape.size(); i++) {
        dims += (i ? "," : "") + std::to_string(shape[i]);
    }
    LOG_PRINT("input %s [%s] :", name, dims.c_str());
    for (const T &v : data) {
        LOG_PRINT(" %.9g", static_cast<double>(v));
    }
    LOG_PRINT("\n");
}

// Deterministic inputs in [lo, hi): a 64-bit LCG, so every run and every device sees the same data.
inline std::vector<float> Uniform(int64_t n, float lo, float hi, uint64_t seed)
{
    std::vector<float> out(n);
    uint64_t state = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    for (auto &v : out) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        v = lo + (hi - lo) * static_cast<float>((state >> 40) * (1.0 / 16777216.0));
    }
    return out;
}

inline void Finalize(int32_t deviceId, aclrtStream stream)
{
    aclrtDestroyStream(stream);
    aclrtResetDevice(deviceId);
    aclFinalize();
}

#endif  // ACLNN_GPU_EXAMPLES_ACL_SAMPLE_H_
