/* The manual's sigmoidcrossentropywithlogitsgrad page: declared in ft78ne.h with the other vendor operators. */
#ifndef SIGMOIDCROSSENTROPYWITHLOGITSGRAD_H
#define SIGMOIDCROSSENTROPYWITHLOGITSGRAD_H
#include "ft78ne.h"
#endif
