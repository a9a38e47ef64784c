/*
 * FT78NE / MT7004 DSP loss kernels: the vendor calling convention.
 *
 * binarycrossentropygrad is verbatim from the vendor manual page; the other kernels extend
 * the same convention (xloss SPEC, "ft78ne and mt7004"):
 *
 *   fp_<op>_s / hp_<op>_s  shared memory: every buffer in DDR; the work is split over the
 *                          cores named in core_mask (8 cores, bit i = core i, 0xff = all).
 *   fp_<op>_p / hp_<op>_p  private memory: runs on the calling core; every buffer must lie in
 *                          that core's private memory (bounded capacity).
 *   fp_ = float32, hp_ = IEEE 754 binary16. FT78NE supports fp_ only; MT7004 fp_ and hp_.
 *
 * reduction: 0 none, 1 mean, 2 sum. dloss (the upstream gradient) has one element per input
 * element for none and one element for mean/sum (mean divides it by the element count).
 * The functions return nothing; see ft78ne_emu.h for how the emulator reports errors.
 *
 * Choices the manual leaves open (documented in backends/ft78ne_shim/README.md):
 *   - binarycrossentropygrad: dx = dloss * w * (x - y) / (x(1-x) + eps), eps = 1e-12 inside
 *     the library (FT78NE_BCE_EPS).
 *   - sigmoidfocalloss(grad) take no per-element weight (none in the signature).
 *   - nlllossgrad: target is int (ignore_index rows get zeros); total_weight is read only for
 *     mean and stays float * in the hp_ form (it is a reduction, never rounded to half).
 *   - fusedlinearcrossentropylossgrad: target_mask is one byte per token (nonzero: the
 *     token's target is not in this shard); in the hp_ form only input, weight and the two
 *     outputs are half, the per-token float operands (grad, logits_max, sum_exp_logits,
 *     softmax) stay float. The _p form takes int accumulate (nonzero: add into the outputs)
 *     in place of core_mask.
 */
#ifndef FT78NE_H
#define FT78NE_H

#include <stdint.h>

#ifndef FT78NE_API
#define FT78NE_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* IEEE 754 binary16 as its bit pattern. A toolchain with a native half type may define
 * FT78NE_HALF_DEFINED and its own 16-bit `half`: only pointers to it cross the ABI. */
#ifndef FT78NE_HALF_DEFINED
#define FT78NE_HALF_DEFINED
typedef uint16_t half;
#endif

#define FT78NE_NUM_CORES 8
#define FT78NE_CORE_MASK_ALL 0xff
#define FT78NE_REDUCTION_NONE 0
#define FT78NE_REDUCTION_MEAN 1
#define FT78NE_REDUCTION_SUM 2
#define FT78NE_BCE_EPS 1e-12f

/* ---- binarycrossentropygrad (vendor manual, verbatim) ---------------------------------- */
FT78NE_API void fp_binarycrossentropygrad_s(int input_size, int reduction, float *input_x, float *input_y,
                                            float *weight, float *dloss, float *dx, int weight_defined,
                                            int core_mask);
FT78NE_API void hp_binarycrossentropygrad_s(int input_size, int reduction, half *input_x, half *input_y,
                                            half *weight, half *dloss, half *dx, int weight_defined,
                                            int core_mask);
FT78NE_API void fp_binarycrossentropygrad_p(int input_size, int reduction, float *input_x, float *input_y,
                                            float *weight, float *dloss, float *dx, int weight_defined);
FT78NE_API void hp_binarycrossentropygrad_p(int input_size, int reduction, half *input_x, half *input_y,
                                            half *weight, half *dloss, half *dx, int weight_defined);

/* ---- sigmoidfocalloss: loss has input_size elements (none) or one (mean/sum) ----------- */
FT78NE_API void fp_sigmoidfocalloss_s(int input_size, int reduction, float alpha, float gamma, float *input_x,
                                      float *input_y, float *loss, int core_mask);
FT78NE_API void hp_sigmoidfocalloss_s(int input_size, int reduction, float alpha, float gamma, half *input_x,
                                      half *input_y, half *loss, int core_mask);
FT78NE_API void fp_sigmoidfocalloss_p(int input_size, int reduction, float alpha, float gamma, float *input_x,
                                      float *input_y, float *loss);
FT78NE_API void hp_sigmoidfocalloss_p(int input_size, int reduction, float alpha, float gamma, half *input_x,
                                      half *input_y, half *loss);

/* ---- sigmoidfocallossgrad ----------------------------------------------------------------- */
FT78NE_API void fp_sigmoidfocallossgrad_s(int input_size, int reduction, float alpha, float gamma,
                                          float *input_x, float *input_y, float *dloss, float *dx, int core_mask);
FT78NE_API void hp_sigmoidfocallossgrad_s(int input_size, int reduction, float alpha, float gamma, half *input_x,
                                          half *input_y, half *dloss, half *dx, int core_mask);
FT78NE_API void fp_sigmoidfocallossgrad_p(int input_size, int reduction, float alpha, float gamma,
                                          float *input_x, float *input_y, float *dloss, float *dx);
FT78NE_API void hp_sigmoidfocallossgrad_p(int input_size, int reduction, float alpha, float gamma, half *input_x,
                                          half *input_y, half *dloss, half *dx);

/* ---- nlllossgrad: dx is batch x classes (batch = 1 for a (C) input) ----------------------- */
FT78NE_API void fp_nlllossgrad_s(int batch, int classes, int reduction, int ignore_index, float *dloss,
                                 int *target, float *weight, float *total_weight, float *dx, int weight_defined,
                                 int core_mask);
FT78NE_API void hp_nlllossgrad_s(int batch, int classes, int reduction, int ignore_index, half *dloss,
                                 int *target, half *weight, float *total_weight, half *dx, int weight_defined,
                                 int core_mask);
FT78NE_API void fp_nlllossgrad_p(int batch, int classes, int reduction, int ignore_index, float *dloss,
                                 int *target, float *weight, float *total_weight, float *dx, int weight_defined);
FT78NE_API void hp_nlllossgrad_p(int batch, int classes, int reduction, int ignore_index, half *dloss,
                                 int *target, half *weight, float *total_weight, half *dx, int weight_defined);

/* ---- fusedlinearcrossentropylossgrad: input (bt, hidden), weight (vocab, hidden) ---------- */
FT78NE_API void fp_fusedlinearcrossentropylossgrad_s(int bt, int hidden, int vocab, float *grad, float *input,
                                                     float *weight, unsigned char *target_mask, int *masked_target,
                                                     float *logits_max, float *sum_exp_logits, float *softmax,
                                                     float *input_grad, float *weight_grad, int softmax_defined,
                                                     int core_mask);
FT78NE_API void hp_fusedlinearcrossentropylossgrad_s(int bt, int hidden, int vocab, float *grad, half *input,
                                                     half *weight, unsigned char *target_mask, int *masked_target,
                                                     float *logits_max, float *sum_exp_logits, float *softmax,
                                                     half *input_grad, half *weight_grad, int softmax_defined,
                                                     int core_mask);
FT78NE_API void fp_fusedlinearcrossentropylossgrad_p(int bt, int hidden, int vocab, float *grad, float *input,
                                                     float *weight, unsigned char *target_mask, int *masked_target,
                                                     float *logits_max, float *sum_exp_logits, float *softmax,
                                                     float *input_grad, float *weight_grad, int softmax_defined,
                                                     int accumulate);
FT78NE_API void hp_fusedlinearcrossentropylossgrad_p(int bt, int hidden, int vocab, float *grad, half *input,
                                                     half *weight, unsigned char *target_mask, int *masked_target,
                                                     float *logits_max, float *sum_exp_logits, float *softmax,
                                                     half *input_grad, half *weight_grad, int softmax_defined,
                                                     int accumulate);

#ifdef __cplusplus
}
#endif

#endif /* FT78NE_H */
