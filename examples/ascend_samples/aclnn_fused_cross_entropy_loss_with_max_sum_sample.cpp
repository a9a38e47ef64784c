/* aclnnFusedCrossEntropyLossWithMaxSum (the vocabulary-parallel loss after the all-reduce), called
 * the way CANN's operator documentation shows, passing inputOptional and weightOptional tensors
 * as the vendor's sample does: the op ignores them. Written for xloss; builds unchanged against a
 * CANN toolkit (-lascendcl -lnnopbase -lopapi) or xloss's headers and emulator
 * (-lxloss_aclnn -lxloss_aclrt). */
#include <cstdio>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_fused_cross_entropy_loss_with_max_sum.h"

#define CHECK_RET(cond, return_expr) \
    do {                             \
        if (!(cond)) {               \
            return_expr;             \
        }                            \
    } while (0)

#define LOG_PRINT(message, ...)         \
    do {                                \
        printf(message, ##__VA_ARGS__); \
    } while (0)

int64_t GetShapeSize(const std::vector<int64_t> &shape)
{
    int64_t size = 1;
    for (auto d : shape) {
        size *= d;
    }
    return size;
}

int Init(int32_t deviceId, aclrtStream *stream)
{
    auto ret = aclInit(nullptr);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclInit failed. ERROR: %d\n", ret); return ret);
    ret = aclrtSetDevice(deviceId);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSetDevice failed. ERROR: %d\n", ret); return ret);
    ret = aclrtCreateStream(stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtCreateStream failed. ERROR: %d\n", ret); return ret);
    return 0;
}

template <typename T>
int CreateAclTensor(const std::vector<T> &hostData, const std::vector<int64_t> &shape, void **deviceAddr,
                    aclDataType dataType, aclTensor **tensor)
{
    auto size = GetShapeSize(shape) * sizeof(T);
    auto ret = aclrtMalloc(deviceAddr, size, ACL_MEM_MALLOC_HUGE_FIRST);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtMalloc failed. ERROR: %d\n", ret); return ret);
    ret = aclrtMemcpy(*deviceAddr, size, hostData.data(), size, ACL_MEMCPY_HOST_TO_DEVICE);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtMemcpy failed. ERROR: %d\n", ret); return ret);
    std::vector<int64_t> strides(shape.size(), 1);  // contiguous
    for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; i--) {
        strides[i] = shape[i + 1] * strides[i + 1];
    }
    *tensor = aclCreateTensor(shape.data(), shape.size(), dataType, strides.data(), 0, aclFormat::ACL_FORMAT_ND,
                              shape.data(), shape.size(), *deviceAddr);
    return 0;
}

int main()
{
    int32_t deviceId = 0;
    aclrtStream stream;
    auto ret = Init(deviceId, &stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("Init acl failed. ERROR: %d\n", ret); return ret);

    // 3 tokens, a shard of 4 vocabulary columns; the statistics are the all-reduced ones
    std::vector<int64_t> rowShape = {3}, logitsShape = {3, 4};
    std::vector<float> logitsMaxHostData = {1.5f, 0.25f, 2.0f};
    std::vector<float> sumExpLogitsHostData = {2.5f, 4.0f, 1.25f};
    std::vector<float> predictedLogitsHostData = {-0.5f, 0.0f, -1.75f};
    std::vector<float> unusedHostData = {1.0f, 2.0f, 3.0f};  // inputOptional / weightOptional: ignored
    std::vector<float> logitsHostData = {1.5f, 0.5f, -1.0f, 0.0f, 0.25f, -0.25f, 0.125f, 0.0f, 2.0f, -2.0f, 1.0f, 0.5f};
    std::vector<float> zeros(12, 0.0f);
    float labelSmoothing = 0.0f;
    void *maxAddr = nullptr, *sumAddr = nullptr, *predAddr = nullptr, *inputAddr = nullptr, *weightAddr = nullptr,
         *logitsAddr = nullptr, *lossAddr = nullptr, *softmaxAddr = nullptr;
    aclTensor *logitsMax = nullptr, *sumExpLogits = nullptr, *predictedLogits = nullptr, *inputOptional = nullptr,
              *weightOptional = nullptr, *vocabParallelLogitsOptional = nullptr, *lossOut = nullptr,
              *softMaxOutOptional = nullptr;
    ret = CreateAclTensor(logitsMaxHostData, rowShape, &maxAddr, aclDataType::ACL_FLOAT, &logitsMax);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(sumExpLogitsHostData, rowShape, &sumAddr, aclDataType::ACL_FLOAT, &sumExpLogits);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(predictedLogitsHostData, rowShape, &predAddr, aclDataType::ACL_FLOAT, &predictedLogits);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(unusedHostData, rowShape, &inputAddr, aclDataType::ACL_FLOAT, &inputOptional);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(unusedHostData, rowShape, &weightAddr, aclDataType::ACL_FLOAT, &weightOptional);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret =
        CreateAclTensor(logitsHostData, logitsShape, &logitsAddr, aclDataType::ACL_FLOAT, &vocabParallelLogitsOptional);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(zeros, rowShape, &lossAddr, aclDataType::ACL_FLOAT, &lossOut);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(zeros, logitsShape, &softmaxAddr, aclDataType::ACL_FLOAT, &softMaxOutOptional);
    CHECK_RET(ret == ACL_SUCCESS, return ret);

    uint64_t workspaceSize = 0;
    aclOpExecutor *executor;
    ret = aclnnFusedCrossEntropyLossWithMaxSumGetWorkspaceSize(
        logitsMax, sumExpLogits, predictedLogits, labelSmoothing, inputOptional, weightOptional,
        vocabParallelLogitsOptional, lossOut, softMaxOutOptional, &workspaceSize, &executor);
    CHECK_RET(ret == ACL_SUCCESS,
              LOG_PRINT("aclnnFusedCrossEntropyLossWithMaxSumGetWorkspaceSize failed. ERROR: %d\n", ret);
              return ret);
    void *workspaceAddr = nullptr;
    if (workspaceSize > 0) {
        ret = aclrtMalloc(&workspaceAddr, workspaceSize, ACL_MEM_MALLOC_HUGE_FIRST);
        CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("allocate workspace failed. ERROR: %d\n", ret); return ret);
    }
    ret = aclnnFusedCrossEntropyLossWithMaxSum(workspaceAddr, workspaceSize, executor, stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnFusedCrossEntropyLossWithMaxSum failed. ERROR: %d\n", ret);
              return ret);
    ret = aclrtSynchronizeStream(stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSynchronizeStream failed. ERROR: %d\n", ret); return ret);

    const char *names[] = {"lossOut", "softMaxOutOptional"};
    void *addrs[] = {lossAddr, softmaxAddr};
    int64_t sizes[] = {GetShapeSize(rowShape), GetShapeSize(logitsShape)};
    for (int k = 0; k < 2; k++) {
        std::vector<float> resultData(sizes[k], 0);
        ret = aclrtMemcpy(resultData.data(), resultData.size() * sizeof(float), addrs[k], sizes[k] * sizeof(float),
                          ACL_MEMCPY_DEVICE_TO_HOST);
        CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("copy result from device to host failed. ERROR: %d\n", ret);
                  return ret);
        for (int64_t i = 0; i < sizes[k]; i++) {
            LOG_PRINT("%s[%ld] is: %.9g\n", names[k], (long)i, resultData[i]);
        }
    }

    aclDestroyTensor(logitsMax);
    aclDestroyTensor(sumExpLogits);
    aclDestroyTensor(predictedLogits);
    aclDestroyTensor(inputOptional);
    aclDestroyTensor(weightOptional);
    aclDestroyTensor(vocabParallelLogitsOptional);
    aclDestroyTensor(lossOut);
    aclDestroyTensor(softMaxOutOptional);
    for (void *addr : {maxAddr, sumAddr, predAddr, inputAddr, weightAddr, logitsAddr, lossAddr, softmaxAddr}) {
        aclrtFree(addr);
    }
    if (workspaceSize > 0) {
        aclrtFree(workspaceAddr);
    }
    aclrtDestroyStream(stream);
    aclrtResetDevice(deviceId);
    aclFinalize();
    return 0;
}
