/* Array forms of xloss_half.h's four conversions, for tests/backends/common/test_half.py (cffi). */
#include <stddef.h>

#include "xloss_half.h"

void harness_f16_to_f32(const uint16_t *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = xloss_f16_to_f32(src[i]);
}

void harness_f32_to_f16(const float *src, uint16_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = xloss_f32_to_f16(src[i]);
}

void harness_bf16_to_f32(const uint16_t *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = xloss_bf16_to_f32(src[i]);
}

void harness_f32_to_bf16(const float *src, uint16_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = xloss_f32_to_bf16(src[i]);
}
