/* The runtime's public conversions: aclFloat16ToFloat / aclFloatToFloat16 (CANN) and xlossEmuCast
 * (emulator only). The conversions themselves are in xloss_half.h (backends/common/include), shared
 * with the operators and the FT78NE emulator. */
#include <string.h>

#include "emu_internal.h"

EMU_EXPORT float aclFloat16ToFloat(aclFloat16 value) { return xloss_f16_to_f32(value); }
EMU_EXPORT aclFloat16 aclFloatToFloat16(float value) { return xloss_f32_to_f16(value); }

static float load_as_f32(const char *p, aclDataType t)
{
    uint16_t h;
    float f;
    switch (t) {
    case ACL_FLOAT16:
        memcpy(&h, p, 2);
        return xloss_f16_to_f32(h);
    case ACL_BF16:
        memcpy(&h, p, 2);
        return xloss_bf16_to_f32(h);
    default:
        memcpy(&f, p, 4);
        return f;
    }
}

static void store_from_f32(char *p, aclDataType t, float f)
{
    uint16_t h;
    switch (t) {
    case ACL_FLOAT16:
        h = xloss_f32_to_f16(f);
        memcpy(p, &h, 2);
        break;
    case ACL_BF16:
        h = xloss_f32_to_bf16(f);
        memcpy(p, &h, 2);
        break;
    default:
        memcpy(p, &f, 4);
    }
}

EMU_EXPORT aclError xlossEmuCast(const void *src, aclDataType srcType, void *dst, aclDataType dstType, uint64_t n)
{
    if ((!src || !dst) && n) {
        emu_set_error("xlossEmuCast: NULL buffer");
        return ACL_ERROR_INVALID_PARAM;
    }
    if (!emu_is_float_type(srcType) || !emu_is_float_type(dstType)) {
        emu_set_error("xlossEmuCast: only FLOAT, FLOAT16 and BF16 are supported");
        return ACL_ERROR_INVALID_PARAM;
    }
    size_t ss = emu_dtype_size(srcType), ds = emu_dtype_size(dstType);
    if (n > (uint64_t)SIZE_MAX / 4) {
        emu_set_error("xlossEmuCast: n too large");
        return ACL_ERROR_INVALID_PARAM;
    }
    const char *s = src;
    char *d = dst;
    for (uint64_t i = 0; i < n; i++)
        store_from_f32(d + i * ds, dstType, load_as_f32(s + i * ss, srcType));
    return ACL_SUCCESS;
}
