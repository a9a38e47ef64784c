/*
 * Stress driver for the FT78NE/MT7004 emulator, compiled together with its sources under
 * sanitizers by test_c.py:
 *   - shared memory: every operator, fp_ and hp_, sizes around the block/core boundaries, several
 *     core masks, on exact-size heap buffers (AddressSanitizer catches one byte too far);
 *   - private memory: the arena is filled with a pattern; after each call every byte outside the
 *     outputs' extents must be unchanged (no write past an output inside the arena);
 *   - refused calls (bad mask, NULL, outside private memory, over capacity, bad index) write nothing;
 *   - several threads at once, each with its own chip and core (ThreadSanitizer build).
 * Exit status 0 when everything held; messages on stderr otherwise.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ft78ne.h"
#include "ft78ne_emu.h"

static int failures;
#define FAIL(...) \
    (fprintf(stderr, __VA_ARGS__), fputc('\n', stderr), __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED))
#define EXPECT(cond, ...) ((cond) ? (void)0 : (void)FAIL(__VA_ARGS__))

static unsigned rnd_state = 1u;
static float frand(unsigned *s) { /* in [0, 1) */
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffffu) / 65536.0f;
}

static void *xmalloc(size_t n) { /* exact size (at least one byte): ASan guards the end */
    void *p = malloc(n ? n : 1);
    if (!p)
        abort();
    return p;
}

/* Float and hp buffers, filled with values the operators accept. */
static void *fbuf(size_t n, int hp, float lo, float hi, unsigned *s) {
    void *p = xmalloc(n * (hp ? 2 : 4));
    for (size_t i = 0; i < n; i++) {
        float v = lo + (hi - lo) * frand(s);
        if (hp) { /* through float -> half of the library itself is not available: a crude encoding */
            _Float16 h = (_Float16)v;
            memcpy((char *)p + 2 * i, &h, 2);
        } else {
            memcpy((char *)p + 4 * i, &v, 4);
        }
    }
    return p;
}

static int status(void) { return ft78ne_emu_last_error(); }

/* ---- shared memory over sizes and masks ------------------------------------------------------- */
static void shared_elementwise(int n, int mask, int hp) {
    unsigned s = (unsigned)n * 7u + (unsigned)mask;
    void *x = fbuf((size_t)n, hp, 0.01f, 0.99f, &s), *y = fbuf((size_t)n, hp, 0.0f, 1.0f, &s);
    void *w = fbuf((size_t)n, hp, 0.0f, 2.0f, &s), *dl = fbuf((size_t)n, hp, -1.0f, 1.0f, &s);
    void *one = fbuf(1, hp, 0.5f, 0.5f, &s), *out = xmalloc((size_t)n * (hp ? 2 : 4));
    void *loss1 = xmalloc(hp ? 2 : 4);
    for (int red = 0; red < 3; red++) {
        void *d = red == 0 ? dl : one;
        if (hp) {
            hp_binarycrossentropygrad_s(n, red, x, y, w, d, out, 1, mask);
            EXPECT(!status(), "hp bce n=%d mask=%#x: %s", n, mask, ft78ne_emu_last_error_message());
            hp_sigmoidfocalloss_s(n, red, 0.25f, 2.0f, x, y, red == 0 ? out : loss1, mask);
            EXPECT(!status(), "hp focal n=%d: %s", n, ft78ne_emu_last_error_message());
            hp_sigmoidfocallossgrad_s(n, red, 0.25f, 0.5f, x, y, d, out, mask);
            EXPECT(!status(), "hp focal grad n=%d: %s", n, ft78ne_emu_last_error_message());
        } else {
            fp_binarycrossentropygrad_s(n, red, x, y, w, d, out, 1, mask);
            EXPECT(!status(), "fp bce n=%d mask=%#x: %s", n, mask, ft78ne_emu_last_error_message());
            fp_sigmoidfocalloss_s(n, red, -1.0f, 0.0f, x, y, red == 0 ? out : loss1, mask);
            EXPECT(!status(), "fp focal n=%d: %s", n, ft78ne_emu_last_error_message());
            fp_sigmoidfocallossgrad_s(n, red, 1.0f, 3.0f, x, y, d, out, mask);
            EXPECT(!status(), "fp focal grad n=%d: %s", n, ft78ne_emu_last_error_message());
        }
    }
    free(x), free(y), free(w), free(dl), free(one), free(out), free(loss1);
}

static void shared_nll(int batch, int classes, int mask, int hp) {
    unsigned s = (unsigned)(batch * 31 + classes);
    size_t es = hp ? 2 : 4;
    void *dl = fbuf((size_t)batch, hp, -1, 1, &s), *w = fbuf((size_t)classes, hp, 0, 2, &s);
    void *dx = xmalloc((size_t)batch * (size_t)classes * es);
    int *t = xmalloc((size_t)batch * sizeof(int));
    void *tw = fbuf(1, hp, 1, 4, &s); /* total_weight: one element of the dtype (the manual's page) */
    for (int i = 0; i < batch; i++)
        t[i] = classes == 0 ? 0 : (int)(frand(&s) * (float)classes) % classes;
    int rows = classes == 0 ? 0 : batch; /* labels must lie in [0, class_num): no rows without classes */
    for (int red = 0; red < 3; red++) {
        if (hp)
            hp_nlllossgrad_s(NULL, dl, t, w, tw, dx, rows, classes, red, mask);
        else
            fp_nlllossgrad_s(NULL, dl, t, w, tw, dx, rows, classes, red, mask);
        EXPECT(!status(), "nll %dx%d: %s", batch, classes, ft78ne_emu_last_error_message());
    }
    free(tw);
    free(dl), free(w), free(dx), free(t);
}

static void shared_flce(int bt, int h, int v, int mask, int hp, int softmax) {
    unsigned s = (unsigned)(bt * 131 + h * 17 + v);
    size_t es = hp ? 2 : 4;
    float *grad = fbuf((size_t)bt, 0, -1, 1, &s), *lm = fbuf((size_t)bt, 0, 2, 3, &s);
    float *se = fbuf((size_t)bt, 0, 1, 5, &s), *sm = fbuf((size_t)bt * (size_t)v, 0, 0, 1, &s);
    void *x = fbuf((size_t)bt * (size_t)h, hp, -1, 1, &s), *w = fbuf((size_t)v * (size_t)h, hp, -1, 1, &s);
    unsigned char *m = xmalloc((size_t)bt);
    int *mt = xmalloc((size_t)bt * sizeof(int));
    void *ig = xmalloc((size_t)bt * (size_t)h * es), *wg = xmalloc((size_t)v * (size_t)h * es);
    for (int i = 0; i < bt; i++) {
        m[i] = v == 0 || i % 4 == 1;
        mt[i] = m[i] ? 0 : (int)(frand(&s) * (float)v);
    }
    if (hp)
        hp_fusedlinearcrossentropylossgrad_s(bt, h, v, grad, x, w, m, mt, softmax ? NULL : lm, softmax ? NULL : se,
                                             softmax ? sm : NULL, ig, wg, softmax, mask);
    else
        fp_fusedlinearcrossentropylossgrad_s(bt, h, v, grad, x, w, m, mt, softmax ? NULL : lm, softmax ? NULL : se,
                                             softmax ? sm : NULL, ig, wg, softmax, mask);
    EXPECT(!status(), "flce %d,%d,%d: %s", bt, h, v, ft78ne_emu_last_error_message());
    free(grad), free(lm), free(se), free(sm), free(x), free(w), free(m), free(mt), free(ig), free(wg);
}

/* ---- private memory: nothing outside the outputs changes -------------------------------------- */
typedef struct {
    unsigned char *p;
    size_t n;
} span;

static unsigned char *arena;
static size_t cap;

static void *pcopy(const void *src, size_t n) {
    void *p = ft78ne_emu_private_alloc(0, n);
    if (!p) {
        FAIL("private alloc of %zu: %s", n, ft78ne_emu_last_error_message());
        abort();
    }
    memcpy(p, src, n);
    return p;
}

/* Every arena byte outside the spans must still hold its value from `before`. */
static void arena_unchanged_outside(const unsigned char *before, const span *outs, int k, const char *what) {
    for (size_t i = 0; i < cap; i++) {
        int inside = 0;
        for (int j = 0; j < k; j++)
            inside |= arena + i >= outs[j].p && arena + i < outs[j].p + outs[j].n;
        if (!inside && arena[i] != before[i]) {
            FAIL("%s: arena byte %zu changed outside the outputs", what, i);
            return;
        }
    }
}

static void private_all(int n, int hp) {
    unsigned s = 99u + (unsigned)n;
    size_t es = hp ? 2 : 4;
    unsigned char *before = xmalloc(cap);
    void *hx = fbuf((size_t)n, hp, 0.01f, 0.99f, &s), *hy = fbuf((size_t)n, hp, 0, 1, &s);
    void *hdl = fbuf((size_t)n, hp, -1, 1, &s);
    memset(arena, 0xA5, cap);
    void *x = pcopy(hx, (size_t)n * es), *y = pcopy(hy, (size_t)n * es), *dl = pcopy(hdl, (size_t)n * es);
    void *out = ft78ne_emu_private_alloc(0, (size_t)n * es);
    span o = {out, (size_t)n * es};
    for (int red = 0; red < 3; red++) {
        span o1 = {out, red ? es : (size_t)n * es};
        memcpy(before, arena, cap);
        if (hp)
            hp_binarycrossentropygrad_p(n, red, x, y, NULL, dl, out, 0);
        else
            fp_binarycrossentropygrad_p(n, red, x, y, NULL, dl, out, 0);
        EXPECT(!status(), "private bce: %s", ft78ne_emu_last_error_message());
        arena_unchanged_outside(before, &o, 1, "bce_p");
        memcpy(before, arena, cap);
        if (hp)
            hp_sigmoidfocalloss_p(n, red, 0.25f, 2.0f, x, y, out);
        else
            fp_sigmoidfocalloss_p(n, red, 0.25f, 2.0f, x, y, out);
        EXPECT(!status(), "private focal: %s", ft78ne_emu_last_error_message());
        arena_unchanged_outside(before, &o1, 1, "focal_p");
    }
    /* the same call with the output in DDR: refused, DDR untouched */
    unsigned char *ddr = xmalloc((size_t)n * es);
    memset(ddr, 0x5A, (size_t)n * es);
    if (hp)
        hp_sigmoidfocallossgrad_p(n, 0, 0.25f, 2.0f, x, y, dl, (half *)(void *)ddr);
    else
        fp_sigmoidfocallossgrad_p(n, 0, 0.25f, 2.0f, x, y, dl, (float *)(void *)ddr);
    EXPECT(n == 0 ? !status() : status() == FT78NE_ERR_NOT_PRIVATE, "DDR dx in a _p call: status %d", status());
    for (size_t i = 0; n && i < (size_t)n * es; i++)
        EXPECT(ddr[i] == 0x5A, "refused _p call wrote to DDR");
    ft78ne_emu_private_free(0, x), ft78ne_emu_private_free(0, y), ft78ne_emu_private_free(0, dl);
    ft78ne_emu_private_free(0, out);
    free(before), free(hx), free(hy), free(hdl), free(ddr);
}

static void private_flce(int bt, int h, int v, int hp) {
    unsigned s = 7u + (unsigned)(bt + h + v);
    size_t es = hp ? 2 : 4;
    unsigned char *before = xmalloc(cap);
    float *hg = fbuf((size_t)bt, 0, -1, 1, &s), *hlm = fbuf((size_t)bt, 0, 2, 3, &s),
          *hse = fbuf((size_t)bt, 0, 1, 5, &s);
    void *hx = fbuf((size_t)bt * (size_t)h, hp, -1, 1, &s), *hw = fbuf((size_t)v * (size_t)h, hp, -1, 1, &s);
    unsigned char *hm = xmalloc((size_t)bt);
    int *hmt = xmalloc((size_t)bt * sizeof(int));
    for (int i = 0; i < bt; i++) {
        hm[i] = v == 0 || i % 3 == 0;
        hmt[i] = hm[i] ? 0 : i % v;
    }
    memset(arena, 0x3C, cap);
    void *g = pcopy(hg, (size_t)bt * 4), *lm = pcopy(hlm, (size_t)bt * 4), *se = pcopy(hse, (size_t)bt * 4);
    void *x = pcopy(hx, (size_t)bt * (size_t)h * es), *w = pcopy(hw, (size_t)v * (size_t)h * es);
    void *m = pcopy(hm, (size_t)bt), *mt = pcopy(hmt, (size_t)bt * sizeof(int));
    void *ig = ft78ne_emu_private_alloc(0, (size_t)bt * (size_t)h * es);
    void *wg = ft78ne_emu_private_alloc(0, (size_t)v * (size_t)h * es);
    for (int acc = 0; acc < 2; acc++) {
        memcpy(before, arena, cap);
        if (hp)
            hp_fusedlinearcrossentropylossgrad_p(bt, h, v, g, x, w, m, mt, lm, se, NULL, ig, wg, 0, acc);
        else
            fp_fusedlinearcrossentropylossgrad_p(bt, h, v, g, x, w, m, mt, lm, se, NULL, ig, wg, 0, acc);
        EXPECT(!status(), "private flce: %s", ft78ne_emu_last_error_message());
        /* the scratch row lies in the free part of the arena: it may change, but only past the outputs */
        span outs[2] = {{ig, (size_t)bt * (size_t)h * es}, {wg, (size_t)v * (size_t)h * es}};
        size_t used = ft78ne_emu_private_in_use(0);
        for (size_t i = 0; i < used && i < cap; i++) {
            int inside = 0;
            for (int j = 0; j < 2; j++)
                inside |= arena + i >= outs[j].p && arena + i < outs[j].p + outs[j].n;
            if (!inside && arena[i] != before[i]) {
                FAIL("flce_p: arena byte %zu changed outside the outputs", i);
                break;
            }
        }
    }
    void *bufs[] = {g, lm, se, x, w, m, mt, ig, wg};
    for (int i = 0; i < 9; i++)
        EXPECT(ft78ne_emu_private_free(0, bufs[i]) == 0, "free");
    EXPECT(ft78ne_emu_private_in_use(0) == 0, "scratch leaked");
    free(before), free(hg), free(hlm), free(hse), free(hx), free(hw), free(hm), free(hmt);
}

/* ---- refused calls write nothing -------------------------------------------------------------- */
static void refusals(void) {
    float x[3] = {0.5f, 0.5f, 0.5f}, out[3] = {7, 7, 7};
    int t[3] = {0, 5, 1};
    float tw = 1.0f;
    fp_binarycrossentropygrad_s(3, 0, x, x, NULL, x, out, 0, 0);
    EXPECT(status() == FT78NE_ERR_CORE_MASK, "mask 0");
    fp_binarycrossentropygrad_s(3, 0, x, x, NULL, x, out, 0, 0x100);
    EXPECT(status() == FT78NE_ERR_CORE_MASK, "mask 0x100");
    fp_binarycrossentropygrad_s(3, 0, x, x, NULL, NULL, out, 0, 1);
    EXPECT(status() == FT78NE_ERR_NULL_POINTER, "NULL dloss");
    fp_nlllossgrad_s(NULL, x, t, x, &tw, out, 3, 1, 1, 0xff);
    EXPECT(status() == FT78NE_ERR_INDEX, "target 5 of 1 class");
    fp_binarycrossentropygrad_p(3, 0, x, x, NULL, x, out, 0);
    EXPECT(status() == FT78NE_ERR_NOT_PRIVATE, "DDR in _p");
    ft78ne_emu_set_chip(FT78NE_EMU_CHIP_FT78NE);
    hp_binarycrossentropygrad_s(1, 0, (half *)x, (half *)x, NULL, (half *)x, (half *)out, 0, 0xff);
    EXPECT(status() == FT78NE_ERR_UNSUPPORTED, "hp on FT78NE");
    ft78ne_emu_set_chip(FT78NE_EMU_CHIP_MT7004);
    float *big = (float *)arena;
    fp_sigmoidfocalloss_p((int)(cap / 4) + 1, 1, 0.25f, 2.0f, big, big, big);
    EXPECT(status() == FT78NE_ERR_CAPACITY, "over capacity");
    for (int i = 0; i < 3; i++)
        EXPECT(out[i] == 7.0f, "a refused call wrote its output");
}

/* ---- threads ---------------------------------------------------------------------------------- */
static void *thread_main(void *arg) {
    int id = (int)(intptr_t)arg;
    unsigned s = 1000u + (unsigned)id;
    ft78ne_emu_set_core(id % 8);
    ft78ne_emu_set_chip(id % 2 ? FT78NE_EMU_CHIP_MT7004 : FT78NE_EMU_CHIP_FT78NE);
    for (int rep = 0; rep < 20; rep++) {
        int n = 500 + 97 * rep;
        float *x = fbuf((size_t)n, 0, 0.01f, 0.99f, &s), *y = fbuf((size_t)n, 0, 0, 1, &s), *o = xmalloc((size_t)n * 4);
        float g = 1.0f;
        fp_binarycrossentropygrad_s(n, 1, x, y, NULL, &g, o, 0, 0xff >> (rep % 8));
        EXPECT(!status(), "thread %d: %s", id, ft78ne_emu_last_error_message());
        hp_binarycrossentropygrad_s(1, 0, NULL, NULL, NULL, NULL, NULL, 0, 1); /* NULLs: refused either way */
        EXPECT(status() == (id % 2 ? FT78NE_ERR_NULL_POINTER : FT78NE_ERR_UNSUPPORTED), "thread %d chip", id);
        void *p = ft78ne_emu_private_alloc(id % 8, 4096);
        EXPECT(p != NULL, "thread %d alloc: %s", id, ft78ne_emu_last_error_message());
        if (p) {
            memcpy(p, x, 4096 < (size_t)n * 4 ? 4096 : (size_t)n * 4);
            fp_sigmoidfocalloss_p(64, 0, 0.25f, 2.0f, p, p, (float *)p + 512);
            EXPECT(!status(), "thread %d private: %s", id, ft78ne_emu_last_error_message());
            EXPECT(ft78ne_emu_private_free(id % 8, p) == 0, "thread %d free", id);
        }
        EXPECT(ft78ne_emu_core() == id % 8, "thread %d lost its core", id);
        free(x), free(y), free(o);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int quick = argc > 1 && strcmp(argv[1], "--threads-only") == 0;
    (void)rnd_state;
    ft78ne_emu_set_chip(FT78NE_EMU_CHIP_MT7004);
    ft78ne_emu_set_core(0);
    arena = ft78ne_emu_private_base(0);
    cap = ft78ne_emu_private_capacity();
    if (!quick) {
        static const int sizes[] = {0, 1, 2, 7, 8, 9, 31, 1023, 1024, 1025, 2047, 2049, 8191, 8193};
        static const int masks[] = {0x01, 0x80, 0x03, 0x55, 0xfe, 0xff};
        for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
            for (int hp = 0; hp < 2; hp++)
                shared_elementwise(sizes[i], masks[i % 6], hp);
        for (int b = 0; b < 12; b += 3)
            for (int c = 0; c < 9; c += 4)
                for (int hp = 0; hp < 2; hp++)
                    shared_nll(b, c, masks[(b + c) % 6], hp);
        for (int bt = 0; bt < 10; bt += 3)
            for (int h = 0; h < 6; h += 5)
                for (int v = 0; v < 8; v += 3)
                    for (int hp = 0; hp < 2; hp++) {
                        shared_flce(bt, h, v, masks[(bt + v) % 6], hp, 0);
                        shared_flce(bt, h, v, 0xff, hp, 1);
                    }
        for (size_t i = 0; i < 8; i++)
            for (int hp = 0; hp < 2; hp++)
                private_all(sizes[i * 2 % 14], hp);
        private_flce(7, 5, 4, 0), private_flce(7, 5, 4, 1), private_flce(0, 3, 2, 0), private_flce(5, 0, 3, 1);
        refusals();
    }
    pthread_t th[8];
    for (int i = 0; i < 8; i++)
        pthread_create(&th[i], NULL, thread_main, (void *)(intptr_t)i);
    for (int i = 0; i < 8; i++)
        pthread_join(th[i], NULL);
    if (failures)
        fprintf(stderr, "%d failure(s)\n", failures);
    else
        printf("abi_stress: OK\n");
    return failures != 0;
}
