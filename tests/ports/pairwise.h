/* Shared by the test ports of both conventions (tests/ports/ascend, tests/ports/ft78ne): a float-only
 * pairwise sum, as a port written for a float32 vector unit reduces. */
#ifndef PORT_PAIRWISE_H
#define PORT_PAIRWISE_H

/* Pairwise summation in float (a binary counter of partial sums over blocks of 16 elements): the
 * error grows with log2(n), not n, as a tree reduction on the chip's vector unit. */
typedef struct {
    float level[64];    /* level[i]: the sum of 16 * 2^i elements, present where bit i of blocks is set */
    unsigned long long blocks;
    float block; /* the open block */
    int in_block;
} port_pairwise;

static inline void port_pairwise_add(port_pairwise *s, float v)
{
    s->block += v;
    if (++s->in_block < 16)
        return;
    float carry = s->block;
    int i = 0;
    for (; s->blocks >> i & 1; i++)
        carry += s->level[i];
    s->level[i] = carry;
    s->blocks++;
    s->block = 0.0f;
    s->in_block = 0;
}

static inline float port_pairwise_sum(const port_pairwise *s)
{
    float total = s->block;
    for (int i = 0; i < 64; i++)
        if (s->blocks >> i & 1)
            total += s->level[i];
    return total;
}

#endif
