/* The manual's sigmoidcrossentropywithlogits page: declared in ft78ne.h with the other vendor operators. */
#ifndef SIGMOIDCROSSENTROPYWITHLOGITS_H
#define SIGMOIDCROSSENTROPYWITHLOGITS_H
#include "ft78ne.h"
#endif
