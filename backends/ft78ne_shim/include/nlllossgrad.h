/* The manual's per-operator header (`#include <nlllossgrad.h>`): the whole FT78NE/MT7004 ABI is in ft78ne.h. */
#ifndef NLLLOSSGRAD_H
#define NLLLOSSGRAD_H
#include "ft78ne.h"
#endif
