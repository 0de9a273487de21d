/* observers.h: the registry's callbacks (observers.c); userdata is the
 * daemon. */
#ifndef GPUIPCD_OBSERVERS_H
#define GPUIPCD_OBSERVERS_H

#include "registry.h"

extern const struct registry_callbacks daemon_observers;

#endif
