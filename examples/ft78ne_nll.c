/*
 * The FT78NE/MT7004 manual's nlllossgrad page as a C program, run on xloss's host emulator
 * (libxloss_ft78ne.so): the shared-memory call over all eight cores (fp_, FT78NE), then the
 * private-memory call of one core (hp_, MT7004). Build and run with the emulator, e.g.
 *   gcc -std=c11 -Ibackends/ft78ne_shim/include examples/ft78ne_nll.c -Lbackends/ft78ne_shim \
 *       -lxloss_ft78ne -Wl,-rpath,backends/ft78ne_shim -o nll && ./nll
 *
 * The page's signature: (logits, loss_grad, labels, weight, total_weight, logits_grad, batch,
 * class_num, reduction_type[, core_mask]); logits is read for its size only; labels must lie in
 * [0, class_num) (there is no ignore_index); reduction_type 0 none, 1 sum, 2 mean (the page's
 * loss_grad text; its parameter list reads 0 sum, 1 mean, 2 none: see ft78ne.h).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <ft78ne_emu.h>
#include <nlllossgrad.h>

#define BATCH 6
#define CLASSES 4

static half f2h(float f)
{ /* exact for the small dyadic values used here */
    _Float16 h = (_Float16)f;
    half bits;
    memcpy(&bits, &h, sizeof bits);
    return bits;
}
static float h2f(half bits)
{
    _Float16 h;
    memcpy(&h, &bits, sizeof h);
    return (float)h;
}

int main(void)
{
    float logits[BATCH * CLASSES], grad[BATCH * CLASSES], weight[CLASSES] = {1.0f, 2.0f, 0.5f, 1.0f};
    float loss_grad[1] = {1.0f}, total_weight[1];
    int labels[BATCH] = {0, 1, 2, 3, 1, 0};
    total_weight[0] = 0.0f;
    for (int i = 0; i < BATCH; i++)
        total_weight[0] += weight[labels[i]];
    for (int i = 0; i < BATCH * CLASSES; i++)
        logits[i] = -1.0f - (float)(i % 5); /* never read: only its size matters */

    /* FT78NE, shared memory, mean over all cores */
    fp_nlllossgrad_s(logits, loss_grad, labels, weight, total_weight, grad, BATCH, CLASSES, FT78NE_NLL_REDUCTION_MEAN,
                     FT78NE_CORE_MASK_ALL);
    int bad = ft78ne_emu_last_error() != FT78NE_OK;
    for (int i = 0; i < BATCH; i++)
        for (int c = 0; c < CLASSES; c++) {
            float want = c == labels[i] ? -weight[c] / total_weight[0] : 0.0f;
            bad |= fabsf(grad[i * CLASSES + c] - want) > 1e-6f;
        }
    printf("shared fp mean: logits_grad[1][1] = %.6f (-2 / %.1f)\n", grad[1 * CLASSES + 1], total_weight[0]);

    /* MT7004, private memory of core 0, sum: the buffers one after another from the arena's start */
    ft78ne_emu_set_chip(FT78NE_EMU_CHIP_MT7004);
    ft78ne_emu_set_core(0);
    int *p_labels = ft78ne_emu_private_base(0); /* the int buffer first: every buffer stays aligned */
    half *p_logits = (half *)(p_labels + BATCH), *p_loss_grad = p_logits + BATCH * CLASSES, *p_weight = p_loss_grad + 1,
         *p_total = p_weight + CLASSES, *p_grad = p_total + 1;
    for (int i = 0; i < BATCH * CLASSES; i++)
        p_logits[i] = f2h(logits[i]);
    p_loss_grad[0] = f2h(0.5f);
    for (int c = 0; c < CLASSES; c++)
        p_weight[c] = f2h(weight[c]);
    p_total[0] = f2h(total_weight[0]);
    memcpy(p_labels, labels, sizeof labels);
    hp_nlllossgrad_p(p_logits, p_loss_grad, p_labels, p_weight, p_total, p_grad, BATCH, CLASSES,
                     FT78NE_NLL_REDUCTION_SUM);
    if (ft78ne_emu_last_error() != FT78NE_OK) {
        printf("hp_nlllossgrad_p: %s\n", ft78ne_emu_last_error_message());
        bad = 1;
    }
    for (int i = 0; i < BATCH; i++)
        bad |= h2f(p_grad[i * CLASSES + labels[i]]) != -0.5f * weight[labels[i]];
    printf("private hp sum: logits_grad[2][2] = %.4f\n", h2f(p_grad[2 * CLASSES + 2]));

    /* a label outside [0, class_num) is refused before anything is written */
    labels[3] = CLASSES;
    grad[0] = 7.0f;
    ft78ne_emu_set_chip(FT78NE_EMU_CHIP_FT78NE);
    fp_nlllossgrad_s(logits, loss_grad, labels, weight, total_weight, grad, BATCH, CLASSES, FT78NE_NLL_REDUCTION_SUM,
                     FT78NE_CORE_MASK_ALL);
    printf("label %d of %d classes: error %d (%s), logits_grad untouched: %s\n", CLASSES, CLASSES,
           ft78ne_emu_last_error(), ft78ne_emu_last_error_message(), grad[0] == 7.0f ? "yes" : "no");
    bad |= ft78ne_emu_last_error() != FT78NE_ERR_INDEX || grad[0] != 7.0f;
    puts(bad ? "FAILED" : "OK");
    return bad;
}
