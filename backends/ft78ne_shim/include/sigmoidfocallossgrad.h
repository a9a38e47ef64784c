/* The manual's per-operator header (`#include <sigmoidfocallossgrad.h>`): the whole FT78NE/MT7004 ABI is in ft78ne.h. */
#ifndef SIGMOIDFOCALLOSSGRAD_H
#define SIGMOIDFOCALLOSSGRAD_H
#include "ft78ne.h"
#endif
