/* OURS, not CANN's: a minimal op::fp16_t at CANN's include path (opbase
 * include/nnopbase/opdev/fp16_t.h, whose implementation lives in CANN's library, not the header),
 * written for xloss with only what the vendor's operator samples use: 16 bits of IEEE binary16
 * storage (`val`), construction from an arithmetic value (rounded to nearest even; a uint16_t
 * argument is taken as the raw bits, as in CANN), assignment, and conversion to float. C++ only,
 * as CANN's is. */
#ifndef XLOSS_ACLNN_OPDEV_FP16_T_H_
#define XLOSS_ACLNN_OPDEV_FP16_T_H_

#ifndef __cplusplus
#error "aclnn/opdev/fp16_t.h is C++ only (as CANN's)"
#endif

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace op
{

struct fp16_t {
    uint16_t val;

    fp16_t() : val(0) {}
    constexpr fp16_t(const uint16_t &bits) : val(bits) {} /* raw bits, as CANN's */
    template <typename T, typename = typename std::enable_if<std::is_arithmetic<T>::value>::type>
    fp16_t(const T &value) : val(FromFloat(static_cast<float>(value)))
    {
    }

    template <typename T, typename = typename std::enable_if<std::is_arithmetic<T>::value>::type>
    fp16_t &operator=(const T &value)
    {
        val = FromFloat(static_cast<float>(value));
        return *this;
    }

    operator float() const { return ToFloat(val); }

    static uint16_t FromFloat(float f)
    {
        uint32_t x;
        std::memcpy(&x, &f, 4);
        uint32_t sign = (x >> 16) & 0x8000u, mag = x & 0x7fffffffu;
        if (mag > 0x7f800000u) /* NaN: keep it quiet */
            return static_cast<uint16_t>(sign | 0x7e00u | ((mag >> 13) & 0x3ffu));
        if (mag >= 0x477ff000u) /* rounds to at least 65520: infinity */
            return static_cast<uint16_t>(sign | 0x7c00u);
        if (mag < 0x38800000u) { /* below 2^-14: a subnormal half (or zero) */
            if (mag < 0x33000000u) /* at most half the smallest subnormal (2^-25): zero */
                return static_cast<uint16_t>(sign);
            uint32_t mant = (mag & 0x7fffffu) | 0x800000u;
            int shift = 126 - static_cast<int>(mag >> 23); /* 14..24 */
            uint32_t q = mant >> shift, rem = mant & ((1u << shift) - 1), halfway = 1u << (shift - 1);
            q += rem > halfway || (rem == halfway && (q & 1u));
            return static_cast<uint16_t>(sign | q);
        }
        uint32_t h = mag - 0x38000000u; /* rebias the exponent */
        uint32_t q = h >> 13, rem = h & 0x1fffu;
        q += rem > 0x1000u || (rem == 0x1000u && (q & 1u));
        return static_cast<uint16_t>(sign | q);
    }

    static float ToFloat(uint16_t h)
    {
        uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
        if (e == 0x1fu) {
            x = sign | 0x7f800000u | (m << 13);
        } else if (e != 0) {
            x = sign | ((e + 112u) << 23) | (m << 13);
        } else if (m == 0) {
            x = sign;
        } else { /* subnormal: normalise */
            e = 113;
            while (!(m & 0x400u)) {
                m <<= 1;
                e--;
            }
            x = sign | (e << 23) | ((m & 0x3ffu) << 13);
        }
        float f;
        std::memcpy(&f, &x, 4);
        return f;
    }
};

static_assert(sizeof(fp16_t) == 2, "fp16_t is the 16 bits of a binary16");

} // namespace op

#endif
