/* The manual's per-operator header (`#include <binarycrossentropygrad.h>`): the whole FT78NE/MT7004 ABI is in ft78ne.h. */
#ifndef BINARYCROSSENTROPYGRAD_H
#define BINARYCROSSENTROPYGRAD_H
#include "ft78ne.h"
#endif
