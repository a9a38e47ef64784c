/*
 * The FT78NE manual's two binarycrossentropygrad call examples, run on xloss's host emulator
 * (libxloss_ft78ne.so). Build and run: sh examples/ft78ne_build.sh
 *
 * On the DSP the manual's buffers sit at fixed addresses: DDR (0xA0000000...) for the shared
 * version, the core's private memory ("L2", 0x10000000...) for the private one. On the host
 * the DDR buffers are ordinary heap memory, and the private buffers are laid out the same way
 * (one after the other) at the start of the emulated core's private memory
 * (ft78ne_emu_private_base, an emulator-only helper).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <binarycrossentropygrad.h>
#include <ft78ne_emu.h>

#define N 1024

/* Deterministic data: probabilities in (0, 1), binary labels, weights in [0.5, 1.5). */
static void fill(float *x, float *y, float *w, int n)
{
    unsigned s = 12345u;
    for (int i = 0; i < n; i++) {
        s = s * 1103515245u + 12345u;
        x[i] = ((s >> 8) % 9999 + 1) / 10000.0f;
        y[i] = (float)((s >> 20) & 1u);
        w[i] = 0.5f + ((s >> 4) % 1000) / 1000.0f;
    }
}

/* The manual's formula in double: dx = dL' * w * (x - y) / (x(1-x) + eps), mean divides dL' by n. */
static int check(const char *what, const float *x, const float *y, const float *w, float dloss, int n, const float *dx)
{
    double worst = 0.0;
    for (int i = 0; i < n; i++) {
        double e = (double)dloss / n * (w ? w[i] : 1.0) * ((double)x[i] - y[i]) / ((double)x[i] * (1.0 - x[i]) + 1e-12);
        double err = (dx[i] - e) / (e != 0.0 ? e : 1.0);
        if (err < 0)
            err = -err;
        if (err > worst)
            worst = err;
    }
    printf("%-8s dx[0..2] = %+.6f %+.6f %+.6f   max relative error vs double: %.2g\n", what, dx[0], dx[1], dx[2],
           worst);
    return worst < 1e-5 ? 0 : 1;
}

static int report(const char *call)
{
    int code = ft78ne_emu_last_error();
    if (code)
        fprintf(stderr, "%s failed (%d): %s\n", call, code, ft78ne_emu_last_error_message());
    return code;
}

int main(int argc, char *argv[])
{
    (void)argc;
    (void)argv;
    int failures = 0;

    /* ---- shared memory: buffers in DDR, all 8 cores (manual example 1) ---- */
    {
        float *input_x = malloc(N * sizeof(float)); /* forward input_x, DDR */
        float *input_y = malloc(N * sizeof(float)); /* forward input_y */
        float *weight = malloc(N * sizeof(float));  /* forward weight */
        float *dloss = malloc(sizeof(float));       /* upstream gradient (one element: mean) */
        float *dx = malloc(N * sizeof(float));      /* output gradient dx */
        if (!input_x || !input_y || !weight || !dloss || !dx)
            return 2;
        fill(input_x, input_y, weight, N);
        dloss[0] = 1.0f;

        int input_size = 1024;
        int reduction = 1;      /* Mean */
        int weight_defined = 1; /* true */
        int core_mask = 0xff;

        fp_binarycrossentropygrad_s(input_size, reduction, input_x, input_y, weight, dloss, dx, weight_defined,
                                    core_mask);
        failures += report("fp_binarycrossentropygrad_s") ? 1 : check("shared", input_x, input_y, weight, 1.0f, N, dx);
        free(input_x), free(input_y), free(weight), free(dloss), free(dx);
    }

    /* ---- private memory: buffers in core 0's private memory (manual example 2) ---- */
    {
        ft78ne_emu_set_core(0); /* this thread plays core 0 */
        unsigned char *l2 = ft78ne_emu_private_base(0);
        if (!l2)
            return report("ft78ne_emu_private_base") ? 2 : 2;
        float *input_x = (float *)(l2 + 0 * N * sizeof(float)); /* forward input_x, L2 */
        float *input_y = (float *)(l2 + 1 * N * sizeof(float)); /* forward input_y */
        float *weight = (float *)(l2 + 2 * N * sizeof(float));  /* forward weight (not read: weight_defined = 0) */
        float *dloss = (float *)(l2 + 3 * N * sizeof(float));   /* upstream gradient */
        float *dx = (float *)(l2 + 4 * N * sizeof(float));      /* output gradient dx */
        fill(input_x, input_y, weight, N);
        dloss[0] = 1.0f;

        int input_size = 1024;
        int reduction = 1;      /* Mean */
        int weight_defined = 0; /* false */

        fp_binarycrossentropygrad_p(input_size, reduction, input_x, input_y, weight, dloss, dx, weight_defined);
        failures += report("fp_binarycrossentropygrad_p") ? 1 : check("private", input_x, input_y, NULL, 1.0f, N, dx);

        /* The same call with dx in DDR is refused, and leaves dx untouched. */
        float *ddr_dx = malloc(N * sizeof(float));
        if (!ddr_dx)
            return 2;
        memset(ddr_dx, 0, N * sizeof(float));
        fp_binarycrossentropygrad_p(input_size, reduction, input_x, input_y, weight, dloss, ddr_dx, weight_defined);
        int code = ft78ne_emu_last_error();
        int untouched = 1;
        for (int i = 0; i < N; i++)
            untouched &= ddr_dx[i] == 0.0f;
        printf("private, dx in DDR: error %d (%s), dx untouched: %s\n", code, ft78ne_emu_last_error_message(),
               untouched ? "yes" : "no");
        failures += code != FT78NE_ERR_NOT_PRIVATE || !untouched;
        free(ddr_dx);
    }

    printf(failures ? "FAILED\n" : "OK\n");
    return failures ? 1 : 0;
}
