/* A minimal "port author's" library: fp32 BCE gradient (shared and private forms) and focal loss,
 * single core, no private-memory helpers, no chip helper. It reports errors through the emulator's error pair, and its
 * focal loss (deliberately) scribbles over its output before failing for input_size > 1000,
 * as a port might: xloss must still leave the caller's buffer untouched. */
#include <math.h>
#include <stdio.h>

#include "ft78ne.h"
#include "ft78ne_emu.h"

static _Thread_local int err;
static _Thread_local char msg[128];

int ft78ne_emu_last_error(void) { return err; }
const char *ft78ne_emu_last_error_message(void) { return msg; }
#ifndef PORT_NO_EXT_MARKER /* its focal loss follows xloss's own layout (ft78ne.h, "OURS"): say so */
int xloss_ft78ne_ext_abi(void) { return XLOSS_FT78NE_EXT_ABI; }
#endif

void fp_binarycrossentropygrad_s(int input_size, int reduction, float *input_x, float *input_y, float *weight,
                                 float *dloss, float *dx, int weight_defined, int core_mask) {
    err = 0;
    float g = reduction == 0 ? 0.0f : (reduction == 1 ? dloss[0] / (float)input_size : dloss[0]);
    for (int i = 0; i < input_size; i++) {
        float x = input_x[i];
        float d = (x - input_y[i]) / (x * (1.0f - x) + FT78NE_BCE_EPS);
        if (weight_defined)
            d *= weight[i];
        dx[i] = d * (reduction == 0 ? dloss[i] : g);
    }
}

void fp_binarycrossentropygrad_p(int input_size, int reduction, float *input_x, float *input_y, float *weight,
                                 float *dloss, float *dx, int weight_defined) {
    fp_binarycrossentropygrad_s(input_size, reduction, input_x, input_y, weight, dloss, dx, weight_defined, 1);
}

void fp_sigmoidfocalloss_s(int input_size, int reduction, float alpha, float gamma, float *input_x, float *input_y,
                           float *loss, int core_mask) {
    err = 0;
    double sum = 0.0;
    for (int i = 0; i < input_size; i++) {
        double x = input_x[i], y = input_y[i];
        double p = 1.0 / (1.0 + exp(-x));
        double ce = (x > 0 ? x * (1 - y) : -x * y) + log1p(exp(-fabs(x)));
        double q = p * (1 - y) + (1 - p) * y;
        double l = (alpha >= 0 ? alpha * y + (1 - alpha) * (1 - y) : 1.0) * ce * pow(q, gamma);
        if (reduction == 0)
            loss[i] = (float)l;
        sum += l;
    }
    if (reduction != 0)
        loss[0] = (float)(reduction == 1 ? sum / input_size : sum);
    if (input_size > 1000) {
        loss[0] = NAN;
        err = FT78NE_ERR_INVALID_ARGUMENT;
        snprintf(msg, sizeof msg, "fp_sigmoidfocalloss_s: this port handles at most 1000 elements");
    }
}
