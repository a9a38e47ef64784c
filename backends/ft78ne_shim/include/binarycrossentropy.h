/* The manual's binarycrossentropy page (`#include <binarycrossentropy.h>`), its fp_ and hp_ forms (its int8
 * form is not emulated):
 *   L[n] = -w[n] (y[n] log(x[n]) + (1 - y[n]) log(1 - x[n]))     (w[n] = 1 unless weight_defined)
 *   reduction 0 None: loss has input_size elements; 1 Mean, 2 Sum: loss[0] only. tmp_loss: input_size
 *   elements of workspace, left holding the element losses. The page does not say how log(0) is treated:
 *   the emulator clamps each log at -100, as PyTorch's BCELoss (whose formula the page gives). Signatures
 *   verbatim from the page (the _s forms); the _p forms are ASSUMED: the same list without core_mask. */
#ifndef BINARYCROSSENTROPY_H
#define BINARYCROSSENTROPY_H
#include "ft78ne.h"

#ifdef __cplusplus
extern "C" {
#endif

FT78NE_API void fp_binarycrossentropy_s(int input_size, int reduction, float *input_x, float *input_y, float *weight,
                                        float *loss, float *tmp_loss, int weight_defined, int core_mask);
FT78NE_API void hp_binarycrossentropy_s(int input_size, int reduction, half *input_x, half *input_y, half *weight,
                                        half *loss, half *tmp_loss, int weight_defined, int core_mask);
/* ASSUMED: the _s list without core_mask */
FT78NE_API void fp_binarycrossentropy_p(int input_size, int reduction, float *input_x, float *input_y, float *weight,
                                        float *loss, float *tmp_loss, int weight_defined);
FT78NE_API void hp_binarycrossentropy_p(int input_size, int reduction, half *input_x, half *input_y, half *weight,
                                        half *loss, half *tmp_loss, int weight_defined);

#ifdef __cplusplus
}
#endif

#endif
