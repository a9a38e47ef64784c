/* The manual's sigmoidcrossentropywithlogits page: its fp_ and hp_ forms are declared in ft78ne.h with the other
 * vendor operators; its int8 forms (FT78NE only: "FT78NE supports int8, fp32"; MT7004 fp16, fp32) here, signatures
 * verbatim from the page.
 *
 * The page gives the formula loss = -[Y ln p + (1 - Y) ln(1 - p)], p = sigmoid(X), and int8_t logits, labels and
 * output, and nothing else about the int8 form: no scale or zero point, no rounding, no saturation. XLOSS'S CHOICE,
 * NOT THE VENDOR'S: the int8 values are the integers themselves (no scale: the page names none); the formula is
 * evaluated in float32 as the fp_ form evaluates it; its result is converted to int8_t by rounding to nearest,
 * ties to even, and saturating to [-128, 127]. The page does not say labels are 0 or 1; the formula is evaluated
 * for any int8 label. xloss's check of this form accepts any output within one unit of the exact value, saturated
 * (truncation and other roundings pass; a wrap-around does not). */
#ifndef SIGMOIDCROSSENTROPYWITHLOGITS_H
#define SIGMOIDCROSSENTROPYWITHLOGITS_H
#include "ft78ne.h"

#ifdef __cplusplus
extern "C" {
#endif

FT78NE_API void i8_sigmoidcrossentropywithlogits_s(int8_t *input0, int8_t *input1, int8_t *output, int length,
                                                   int core_mask);
FT78NE_API void i8_sigmoidcrossentropywithlogits_p(int8_t *input0, int8_t *input1, int8_t *output, int length);

#ifdef __cplusplus
}
#endif
#endif
