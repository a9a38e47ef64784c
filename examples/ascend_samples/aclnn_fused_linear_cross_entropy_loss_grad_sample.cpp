/* aclnnFusedLinearCrossEntropyLossGrad, called the way CANN's operator documentation shows (same headers, same
 * call sequence: init, device and stream, device tensors, phase one, workspace, phase two,
 * synchronize, copy back, release). Written for xloss; builds unchanged against a CANN toolkit
 * (-lascendcl -lnnopbase -lopapi) or xloss's headers and emulator (-lxloss_aclnn -lxloss_aclrt). */
#include <cstdio>
#include <vector>

#include "acl/acl.h"
#include <cmath>

#include "aclnnop/aclnn_fused_linear_cross_entropy_loss_grad.h"

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

    // memory-saving mode (softmaxOptional nullptr): BT = 4 tokens, H = 8, a vocabulary shard of V = 16;
    // token 2's target lies in another shard (targetMask true)
    const int64_t BT = 4, H = 8, V = 16;
    std::vector<int64_t> gradShape = {BT}, inputShape = {BT, H}, weightShape = {V, H}, maskShape = {BT},
                         targetShape = {BT}, rowShape = {BT};
    std::vector<float> gradHostData = {0.25f, -0.5f, 1.0f, 0.125f};
    std::vector<aclFloat16> inputHostData(BT * H), weightHostData(V * H);
    std::vector<float> inputValues(BT * H), weightValues(V * H);
    for (int64_t i = 0; i < BT * H; i++) {
        inputHostData[i] = aclFloatToFloat16(0.125f * static_cast<float>(i % 7) - 0.375f);
        inputValues[i] = aclFloat16ToFloat(inputHostData[i]);
    }
    for (int64_t i = 0; i < V * H; i++) {
        weightHostData[i] = aclFloatToFloat16(0.0625f * static_cast<float>((3 * i) % 9) - 0.25f);
        weightValues[i] = aclFloat16ToFloat(weightHostData[i]);
    }
    std::vector<uint8_t> maskHostData = {0, 0, 1, 0};  // BOOL
    std::vector<int32_t> targetHostData = {3, 15, 0, 7};
    // the row statistics the forward pass (aclnnFusedLinearOnlineMaxSum plus the all-reduce) would give
    std::vector<float> logitsMaxHostData(BT), sumExpHostData(BT);
    for (int64_t b = 0; b < BT; b++) {
        std::vector<float> logits(V);
        float maxValue = -INFINITY;
        for (int64_t v = 0; v < V; v++) {
            float acc = 0.0f;
            for (int64_t k = 0; k < H; k++) {
                acc += inputValues[b * H + k] * weightValues[v * H + k];
            }
            logits[v] = acc;
            maxValue = std::fmax(maxValue, acc);
        }
        float sum = 0.0f;
        for (int64_t v = 0; v < V; v++) {
            sum += std::exp(logits[v] - maxValue);
        }
        logitsMaxHostData[b] = maxValue;
        sumExpHostData[b] = sum;
    }
    std::vector<aclFloat16> inputGradHostData(BT * H, 0), weightGradHostData(V * H, 0);
    void *gradDeviceAddr = nullptr, *inputDeviceAddr = nullptr, *weightDeviceAddr = nullptr, *maskDeviceAddr = nullptr,
         *targetDeviceAddr = nullptr, *logitsMaxDeviceAddr = nullptr, *sumExpDeviceAddr = nullptr,
         *inputGradDeviceAddr = nullptr, *weightGradDeviceAddr = nullptr;
    aclTensor *grad = nullptr, *input = nullptr, *weight = nullptr, *targetMask = nullptr, *maskedTarget = nullptr,
              *logitsMax = nullptr, *sumExpLogits = nullptr, *inputGradOut = nullptr, *weightGradOut = nullptr;
    ret = CreateAclTensor(gradHostData, gradShape, &gradDeviceAddr, aclDataType::ACL_FLOAT, &grad);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(inputHostData, inputShape, &inputDeviceAddr, aclDataType::ACL_FLOAT16, &input);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(weightHostData, weightShape, &weightDeviceAddr, aclDataType::ACL_FLOAT16, &weight);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(maskHostData, maskShape, &maskDeviceAddr, aclDataType::ACL_BOOL, &targetMask);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(targetHostData, targetShape, &targetDeviceAddr, aclDataType::ACL_INT32, &maskedTarget);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(logitsMaxHostData, rowShape, &logitsMaxDeviceAddr, aclDataType::ACL_FLOAT, &logitsMax);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(sumExpHostData, rowShape, &sumExpDeviceAddr, aclDataType::ACL_FLOAT, &sumExpLogits);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(inputGradHostData, inputShape, &inputGradDeviceAddr, aclDataType::ACL_FLOAT16, &inputGradOut);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(weightGradHostData, weightShape, &weightGradDeviceAddr, aclDataType::ACL_FLOAT16,
                          &weightGradOut);
    CHECK_RET(ret == ACL_SUCCESS, return ret);

    uint64_t workspaceSize = 0;
    aclOpExecutor *executor;
    ret = aclnnFusedLinearCrossEntropyLossGradGetWorkspaceSize(grad, input, weight, targetMask, maskedTarget, 0.0f,
                                                               logitsMax, sumExpLogits, nullptr, inputGradOut,
                                                               weightGradOut, &workspaceSize, &executor);
    CHECK_RET(ret == ACL_SUCCESS,
              LOG_PRINT("aclnnFusedLinearCrossEntropyLossGradGetWorkspaceSize failed. ERROR: %d\n", ret);
              return ret);
    void *workspaceAddr = nullptr;
    if (workspaceSize > 0) {
        ret = aclrtMalloc(&workspaceAddr, workspaceSize, ACL_MEM_MALLOC_HUGE_FIRST);
        CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("allocate workspace failed. ERROR: %d\n", ret); return ret);
    }
    ret = aclnnFusedLinearCrossEntropyLossGrad(workspaceAddr, workspaceSize, executor, stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnFusedLinearCrossEntropyLossGrad failed. ERROR: %d\n", ret);
              return ret);
    ret = aclrtSynchronizeStream(stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSynchronizeStream failed. ERROR: %d\n", ret); return ret);

    std::vector<aclFloat16> inputGradResult(BT * H), weightGradResult(V * H);
    ret = aclrtMemcpy(inputGradResult.data(), inputGradResult.size() * sizeof(aclFloat16), inputGradDeviceAddr,
                      inputGradResult.size() * sizeof(aclFloat16), ACL_MEMCPY_DEVICE_TO_HOST);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("copy inputGradOut to host failed. ERROR: %d\n", ret); return ret);
    ret = aclrtMemcpy(weightGradResult.data(), weightGradResult.size() * sizeof(aclFloat16), weightGradDeviceAddr,
                      weightGradResult.size() * sizeof(aclFloat16), ACL_MEMCPY_DEVICE_TO_HOST);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("copy weightGradOut to host failed. ERROR: %d\n", ret); return ret);
    for (int64_t i = 0; i < BT * H; i++) {
        LOG_PRINT("inputGradOut[%ld] is: %.9g\n", (long)i, aclFloat16ToFloat(inputGradResult[i]));
    }
    for (int64_t i = 0; i < V * H; i++) {
        LOG_PRINT("weightGradOut[%ld] is: %.9g\n", (long)i, aclFloat16ToFloat(weightGradResult[i]));
    }

    aclDestroyTensor(grad);
    aclDestroyTensor(input);
    aclDestroyTensor(weight);
    aclDestroyTensor(targetMask);
    aclDestroyTensor(maskedTarget);
    aclDestroyTensor(logitsMax);
    aclDestroyTensor(sumExpLogits);
    aclDestroyTensor(inputGradOut);
    aclDestroyTensor(weightGradOut);
    aclrtFree(gradDeviceAddr);
    aclrtFree(inputDeviceAddr);
    aclrtFree(weightDeviceAddr);
    aclrtFree(maskDeviceAddr);
    aclrtFree(targetDeviceAddr);
    aclrtFree(logitsMaxDeviceAddr);
    aclrtFree(sumExpDeviceAddr);
    aclrtFree(inputGradDeviceAddr);
    aclrtFree(weightGradDeviceAddr);
    if (workspaceSize > 0) {
        aclrtFree(workspaceAddr);
    }
    aclrtDestroyStream(stream);
    aclrtResetDevice(deviceId);
    aclFinalize();
    return 0;
}
