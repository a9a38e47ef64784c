/*
 * FT78NE / MT7004 DSP loss kernels: the vendor calling convention.
 *
 * VENDOR (published in the FT78NE/MT7004 DSP library manual, signatures verbatim):
 *   binarycrossentropygrad   (reduction 0 none, 1 mean, 2 sum)
 *   nlllossgrad              (reduction 0 none, 1 sum, 2 mean by default: see below; the _s
 *                            form only: its _p form is assumed, see at its prototype)
 * OURS (xloss's extensions: the manual has no page for them; marked "OURS" at each prototype):
 *   sigmoidfocalloss, sigmoidfocallossgrad, fusedlinearcrossentropylossgrad, and the marker
 *   xloss_ft78ne_ext_abi(). They follow the vendor's naming and calling pattern, but no vendor
 *   library is known to export them; a library that implements these layouts says so by exporting
 *   xloss_ft78ne_ext_abi() (returning XLOSS_FT78NE_EXT_ABI), and xloss calls them only then.
 *
 *   fp_<op>_s / hp_<op>_s  shared memory: every buffer in DDR; the work is split over the
 *                          cores named in core_mask (8 cores, bit i = core i, 0xff = all).
 *   fp_<op>_p / hp_<op>_p  private memory: runs on the calling core; every buffer must lie in
 *                          that core's private memory (bounded capacity). Same list without
 *                          core_mask (OURS for FLCE: int accumulate in its place).
 *   fp_ = float32, hp_ = IEEE 754 binary16. FT78NE supports fp_ only; MT7004 fp_ and hp_.
 *
 * Reduction codes are per operator. binarycrossentropygrad: 0 none, 1 mean, 2 sum (the manual);
 * our three operators use the same. nlllossgrad: the manual contradicts itself - its parameter
 * list says 0 Sum, 1 Mean, 2 None, while its loss_grad text and the nllloss (forward) page say
 * 0 None, 1 Sum, 2 Mean. We follow the latter (FT78NE_NLL_REDUCTION_*); xloss's adapter takes
 * the other reading with the backend option nll_reduction_codes="sum,mean,none".
 * The functions return nothing; see ft78ne_emu.h for how the emulator reports errors.
 *
 * Choices the manual leaves open (documented in backends/ft78ne_shim/README.md):
 *   - binarycrossentropygrad: dx = dloss * w * (x - y) / (x(1-x) + eps), eps = 1e-12 inside
 *     the library (FT78NE_BCE_EPS).
 *   - nlllossgrad (the manual's page): logits is read for its size only; loss_grad has batch
 *     elements for none, else only loss_grad[0] is read; total_weight (one element, half in
 *     hp_) is read for mean only; weight has class_num elements; no ignore_index: every label
 *     must lie in [0, class_num).
 *   - OURS: sigmoidfocalloss(grad) take no per-element weight.
 *   - OURS: fusedlinearcrossentropylossgrad: target_mask is one byte per token (nonzero: the
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
/* binarycrossentropygrad (the manual) and our three operators */
#define FT78NE_REDUCTION_NONE 0
#define FT78NE_REDUCTION_MEAN 1
#define FT78NE_REDUCTION_SUM 2
/* nlllossgrad: the reading of its loss_grad text and of the nllloss page (see above) */
#define FT78NE_NLL_REDUCTION_NONE 0
#define FT78NE_NLL_REDUCTION_SUM 1
#define FT78NE_NLL_REDUCTION_MEAN 2
/* OURS: the version xloss_ft78ne_ext_abi() returns for the extension layouts declared here */
#define XLOSS_FT78NE_EXT_ABI 1
#define FT78NE_BCE_EPS 1e-12f

/* ---- binarycrossentropygrad (vendor manual, verbatim) ---------------------------------- */
FT78NE_API void fp_binarycrossentropygrad_s(int input_size, int reduction, float *input_x, float *input_y,
                                            float *weight, float *dloss, float *dx, int weight_defined, int core_mask);
FT78NE_API void hp_binarycrossentropygrad_s(int input_size, int reduction, half *input_x, half *input_y, half *weight,
                                            half *dloss, half *dx, int weight_defined, int core_mask);
FT78NE_API void fp_binarycrossentropygrad_p(int input_size, int reduction, float *input_x, float *input_y,
                                            float *weight, float *dloss, float *dx, int weight_defined);
FT78NE_API void hp_binarycrossentropygrad_p(int input_size, int reduction, half *input_x, half *input_y, half *weight,
                                            half *dloss, half *dx, int weight_defined);

/* ---- nlllossgrad (vendor manual, verbatim): logits_grad is batch x class_num ----------- */
FT78NE_API void fp_nlllossgrad_s(float *logits, float *loss_grad, int *labels, float *weight, float *total_weight,
                                 float *logits_grad, int batch, int class_num, int reduction_type, int core_mask);
FT78NE_API void hp_nlllossgrad_s(half *logits, half *loss_grad, int *labels, half *weight, half *total_weight,
                                 half *logits_grad, int batch, int class_num, int reduction_type, int core_mask);
/* ASSUMED, not on the stored manual page: the page gives the _s prototypes only. The _p forms are
 * the _s list without core_mask, the pattern of the manual's pages that show both forms. */
FT78NE_API void fp_nlllossgrad_p(float *logits, float *loss_grad, int *labels, float *weight, float *total_weight,
                                 float *logits_grad, int batch, int class_num, int reduction_type);
FT78NE_API void hp_nlllossgrad_p(half *logits, half *loss_grad, int *labels, half *weight, half *total_weight,
                                 half *logits_grad, int batch, int class_num, int reduction_type);

/* ---- OURS: sigmoidfocalloss (no vendor page): loss has input_size elements (none) or one (mean/sum) ----------- */
/* OURS */ FT78NE_API void fp_sigmoidfocalloss_s(int input_size, int reduction, float alpha, float gamma,
                                                 float *input_x, float *input_y, float *loss, int core_mask);
/* OURS */ FT78NE_API void hp_sigmoidfocalloss_s(int input_size, int reduction, float alpha, float gamma, half *input_x,
                                                 half *input_y, half *loss, int core_mask);
/* OURS */ FT78NE_API void fp_sigmoidfocalloss_p(int input_size, int reduction, float alpha, float gamma,
                                                 float *input_x, float *input_y, float *loss);
/* OURS */ FT78NE_API void hp_sigmoidfocalloss_p(int input_size, int reduction, float alpha, float gamma, half *input_x,
                                                 half *input_y, half *loss);

/* ---- OURS: sigmoidfocallossgrad (no vendor page) ------------------------------------------------------------- */
/* OURS */ FT78NE_API void fp_sigmoidfocallossgrad_s(int input_size, int reduction, float alpha, float gamma,
                                                     float *input_x, float *input_y, float *dloss, float *dx,
                                                     int core_mask);
/* OURS */ FT78NE_API void hp_sigmoidfocallossgrad_s(int input_size, int reduction, float alpha, float gamma,
                                                     half *input_x, half *input_y, half *dloss, half *dx,
                                                     int core_mask);
/* OURS */ FT78NE_API void fp_sigmoidfocallossgrad_p(int input_size, int reduction, float alpha, float gamma,
                                                     float *input_x, float *input_y, float *dloss, float *dx);
/* OURS */ FT78NE_API void hp_sigmoidfocallossgrad_p(int input_size, int reduction, float alpha, float gamma,
                                                     half *input_x, half *input_y, half *dloss, half *dx);

/* ---- OURS: fusedlinearcrossentropylossgrad (no vendor page): input (bt, hidden), weight (vocab, hidden) ---------- */
/* OURS */ FT78NE_API void fp_fusedlinearcrossentropylossgrad_s(int bt, int hidden, int vocab, float *grad,
                                                                float *input, float *weight, unsigned char *target_mask,
                                                                int *masked_target, float *logits_max,
                                                                float *sum_exp_logits, float *softmax,
                                                                float *input_grad, float *weight_grad,
                                                                int softmax_defined, int core_mask);
/* OURS */ FT78NE_API void hp_fusedlinearcrossentropylossgrad_s(int bt, int hidden, int vocab, float *grad, half *input,
                                                                half *weight, unsigned char *target_mask,
                                                                int *masked_target, float *logits_max,
                                                                float *sum_exp_logits, float *softmax, half *input_grad,
                                                                half *weight_grad, int softmax_defined, int core_mask);
/* OURS */ FT78NE_API void fp_fusedlinearcrossentropylossgrad_p(int bt, int hidden, int vocab, float *grad,
                                                                float *input, float *weight, unsigned char *target_mask,
                                                                int *masked_target, float *logits_max,
                                                                float *sum_exp_logits, float *softmax,
                                                                float *input_grad, float *weight_grad,
                                                                int softmax_defined, int accumulate);
/* OURS */ FT78NE_API void hp_fusedlinearcrossentropylossgrad_p(int bt, int hidden, int vocab, float *grad, half *input,
                                                                half *weight, unsigned char *target_mask,
                                                                int *masked_target, float *logits_max,
                                                                float *sum_exp_logits, float *softmax, half *input_grad,
                                                                half *weight_grad, int softmax_defined, int accumulate);

/* ---- sigmoidcrossentropywithlogits and sigmoidcrossentropywithlogitsgrad (vendor manual) ------------
 * Per element, no weight, reduction or upstream gradient: output[i] = -[y ln p + (1-y) ln(1-p)] with
 * p = sigmoid(input0[i]), y = input1[i] (the loss), and output[i] = sigmoid(Input0[i]) - Input1[i] (the
 * gradient). FT78NE: float, and int8 for the loss (its i8_ forms: sigmoidcrossentropywithlogits.h); MT7004:
 * float and half.
 * The forward page's stored copy is cut off inside fp_..._p: hp_sigmoidcrossentropywithlogits_p is
 * ASSUMED to follow the other forms. */
FT78NE_API void fp_sigmoidcrossentropywithlogits_s(float *input0, float *input1, float *output, int length,
                                                   int core_mask);
FT78NE_API void hp_sigmoidcrossentropywithlogits_s(half *input0, half *input1, half *output, int length, int core_mask);
FT78NE_API void fp_sigmoidcrossentropywithlogits_p(float *input0, float *input1, float *output, int length);
FT78NE_API void hp_sigmoidcrossentropywithlogits_p(half *input0, half *input1, half *output, int length);
FT78NE_API void fp_sigmoidcrossentropywithlogitsgrad_s(float *Input0, float *Input1, float *output, int length,
                                                       int core_mask);
FT78NE_API void hp_sigmoidcrossentropywithlogitsgrad_s(half *Input0, half *Input1, half *output, int length,
                                                       int core_mask);
FT78NE_API void fp_sigmoidcrossentropywithlogitsgrad_p(float *Input0, float *Input1, float *output, int length);
FT78NE_API void hp_sigmoidcrossentropywithlogitsgrad_p(half *Input0, half *Input1, half *output, int length);

/* ---- OURS: the extension marker --------------------------------------------------------
 * A library that implements the OURS layouts above exports this and returns XLOSS_FT78NE_EXT_ABI.
 * Without it xloss never calls sigmoidfocalloss(grad) or fusedlinearcrossentropylossgrad, whatever
 * symbols the library exports (a vendor's function of the same name could have another layout). */
/* OURS */ FT78NE_API int xloss_ft78ne_ext_abi(void);

#ifdef __cplusplus
}
#endif

#endif /* FT78NE_H */
