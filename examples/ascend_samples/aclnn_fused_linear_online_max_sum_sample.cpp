/* aclnnFusedLinearOnlineMaxSum (one vocabulary shard of the vocabulary-parallel forward), called the
 * way CANN's operator documentation shows, with its host data in op::fp16_t from
 * aclnn/opdev/fp16_t.h as the vendor's sample keeps it (xloss ships a minimal op::fp16_t there).
 * Written for xloss; builds unchanged against a CANN toolkit (-lascendcl -lnnopbase -lopapi) or
 * xloss's headers and emulator (-lxloss_aclnn -lxloss_aclrt). */
#include <cstdio>
#include <vector>

#include "acl/acl.h"
#include "aclnn/opdev/fp16_t.h"
#include "aclnnop/aclnn_fused_linear_online_max_sum.h"

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

template <typename T>
int CopyBack(const char *name, const std::vector<int64_t> &shape, void *deviceAddr, std::vector<T> &host)
{
    host.assign(GetShapeSize(shape), T(0));
    auto ret = aclrtMemcpy(host.data(), host.size() * sizeof(T), deviceAddr, host.size() * sizeof(T),
                           ACL_MEMCPY_DEVICE_TO_HOST);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("copy %s back failed. ERROR: %d\n", name, ret); return ret);
    for (size_t i = 0; i < host.size(); i++) {
        LOG_PRINT("%s[%ld] is: %.9g\n", name, (long)i, static_cast<double>(static_cast<float>(host[i])));
    }
    return 0;
}

int main()
{
    int32_t deviceId = 0;
    aclrtStream stream;
    auto ret = Init(deviceId, &stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("Init acl failed. ERROR: %d\n", ret); return ret);

    // 5 tokens, hidden 4, a shard of 6 vocabulary rows holding global rows [6, 12)
    const int64_t bt = 5, h = 4, v = 6, vocabStartIndex = 6, vocabEndIndex = 12;
    std::vector<int64_t> inputShape = {bt, h}, weightShape = {v, h}, rowShape = {bt}, maskShape = {(bt + 7) / 8},
                         logitsShape = {bt, v};
    std::vector<op::fp16_t> inputHostData, weightHostData;
    for (int64_t i = 0; i < bt * h; i++) {
        inputHostData.push_back(op::fp16_t(0.25 * static_cast<double>(i % 5) - 0.5));
    }
    for (int64_t i = 0; i < v * h; i++) {
        weightHostData.push_back(op::fp16_t(0.125 * static_cast<double>((3 * i) % 7) - 0.25));
    }
    std::vector<int32_t> targetHostData = {7, 2, 11, 6, 12};  // tokens 1 and 4 are not in this shard
    std::vector<float> statHostData(bt, 0.0f);
    std::vector<uint8_t> maskHostData(maskShape[0], 0);
    std::vector<int32_t> maskedTargetHostData(bt, 0);
    std::vector<op::fp16_t> logitsHostData(bt * v, 0);
    void *inputAddr = nullptr, *weightAddr = nullptr, *targetAddr = nullptr, *maxAddr = nullptr, *sumAddr = nullptr,
         *predAddr = nullptr, *maskAddr = nullptr, *maskedTargetAddr = nullptr, *logitsAddr = nullptr;
    aclTensor *input = nullptr, *weight = nullptr, *target = nullptr, *logitsMaxLocalOut = nullptr,
              *sumExpLogitsLocalOut = nullptr, *predictedLogitsLocalOut = nullptr, *targetMaskOut = nullptr,
              *maskedTargetOut = nullptr, *vocabParallelLogitsOutOptional = nullptr;
    ret = CreateAclTensor(inputHostData, inputShape, &inputAddr, aclDataType::ACL_FLOAT16, &input);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(weightHostData, weightShape, &weightAddr, aclDataType::ACL_FLOAT16, &weight);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(targetHostData, rowShape, &targetAddr, aclDataType::ACL_INT32, &target);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(statHostData, rowShape, &maxAddr, aclDataType::ACL_FLOAT, &logitsMaxLocalOut);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(statHostData, rowShape, &sumAddr, aclDataType::ACL_FLOAT, &sumExpLogitsLocalOut);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(statHostData, rowShape, &predAddr, aclDataType::ACL_FLOAT, &predictedLogitsLocalOut);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(maskHostData, maskShape, &maskAddr, aclDataType::ACL_UINT8, &targetMaskOut);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(maskedTargetHostData, rowShape, &maskedTargetAddr, aclDataType::ACL_INT32, &maskedTargetOut);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(logitsHostData, logitsShape, &logitsAddr, aclDataType::ACL_FLOAT16,
                          &vocabParallelLogitsOutOptional);
    CHECK_RET(ret == ACL_SUCCESS, return ret);

    uint64_t workspaceSize = 0;
    aclOpExecutor *executor;
    ret = aclnnFusedLinearOnlineMaxSumGetWorkspaceSize(input, weight, target, vocabStartIndex, vocabEndIndex,
                                                       logitsMaxLocalOut, sumExpLogitsLocalOut, predictedLogitsLocalOut,
                                                       targetMaskOut, maskedTargetOut, vocabParallelLogitsOutOptional,
                                                       &workspaceSize, &executor);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnFusedLinearOnlineMaxSumGetWorkspaceSize failed. ERROR: %d\n", ret);
              return ret);
    void *workspaceAddr = nullptr;
    if (workspaceSize > 0) {
        ret = aclrtMalloc(&workspaceAddr, workspaceSize, ACL_MEM_MALLOC_HUGE_FIRST);
        CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("allocate workspace failed. ERROR: %d\n", ret); return ret);
    }
    ret = aclnnFusedLinearOnlineMaxSum(workspaceAddr, workspaceSize, executor, stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnFusedLinearOnlineMaxSum failed. ERROR: %d\n", ret); return ret);
    ret = aclrtSynchronizeStream(stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSynchronizeStream failed. ERROR: %d\n", ret); return ret);

    std::vector<float> stat;
    std::vector<uint8_t> mask;
    std::vector<int32_t> maskedTarget;
    std::vector<op::fp16_t> logits;
    CHECK_RET(CopyBack("logitsMaxLocalOut", rowShape, maxAddr, stat) == 0, return 1);
    CHECK_RET(CopyBack("sumExpLogitsLocalOut", rowShape, sumAddr, stat) == 0, return 1);
    CHECK_RET(CopyBack("predictedLogitsLocalOut", rowShape, predAddr, stat) == 0, return 1);
    CHECK_RET(CopyBack("targetMaskOut", maskShape, maskAddr, mask) == 0, return 1);
    CHECK_RET(CopyBack("maskedTargetOut", rowShape, maskedTargetAddr, maskedTarget) == 0, return 1);
    CHECK_RET(CopyBack("vocabParallelLogitsOutOptional", logitsShape, logitsAddr, logits) == 0, return 1);

    aclDestroyTensor(input);
    aclDestroyTensor(weight);
    aclDestroyTensor(target);
    aclDestroyTensor(logitsMaxLocalOut);
    aclDestroyTensor(sumExpLogitsLocalOut);
    aclDestroyTensor(predictedLogitsLocalOut);
    aclDestroyTensor(targetMaskOut);
    aclDestroyTensor(maskedTargetOut);
    aclDestroyTensor(vocabParallelLogitsOutOptional);
    for (void *addr :
         {inputAddr, weightAddr, targetAddr, maxAddr, sumAddr, predAddr, maskAddr, maskedTargetAddr, logitsAddr}) {
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
