/* OURS, not the vendor's: xloss's extension operator (the manual has no sigmoidfocalloss page), declared in ft78ne.h
 * with the other operators; a library implementing it exports xloss_ft78ne_ext_abi(). */
#ifndef SIGMOIDFOCALLOSS_H
#define SIGMOIDFOCALLOSS_H
#include "ft78ne.h"
#endif
