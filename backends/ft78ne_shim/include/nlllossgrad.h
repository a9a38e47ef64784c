/* The manual's per-operator header (`#include <nlllossgrad.h>`); the manual's signatures are in ft78ne.h. */
#ifndef NLLLOSSGRAD_H
#define NLLLOSSGRAD_H
#include "ft78ne.h"
#endif
