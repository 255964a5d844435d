#ifndef WHISPER_CSODIUM_SHIM_H
#define WHISPER_CSODIUM_SHIM_H
#include <sodium.h>
#endif
