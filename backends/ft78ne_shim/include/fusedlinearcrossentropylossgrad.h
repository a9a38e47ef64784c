/* The manual's per-operator header (`#include <fusedlinearcrossentropylossgrad.h>`): the whole FT78NE/MT7004 ABI is in ft78ne.h. */
#ifndef FUSEDLINEARCROSSENTROPYLOSSGRAD_H
#define FUSEDLINEARCROSSENTROPYLOSSGRAD_H
#include "ft78ne.h"
#endif
