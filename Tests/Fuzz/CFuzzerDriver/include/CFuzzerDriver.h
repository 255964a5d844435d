#ifndef WHISPER_C_FUZZER_DRIVER_H
#define WHISPER_C_FUZZER_DRIVER_H
#include <stddef.h>
#include <stdint.h>

/// libFuzzer's entry for programs that have a main of their own (compiler-rt, LLVM 12
/// and later). Only called in the -sanitize=fuzzer build.
int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));

#endif
