/* The manual's per-operator header (`#include <sigmoidfocalloss.h>`): the whole FT78NE/MT7004 ABI is in ft78ne.h. */
#ifndef SIGMOIDFOCALLOSS_H
#define SIGMOIDFOCALLOSS_H
#include "ft78ne.h"
#endif
